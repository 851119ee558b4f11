"""The optional C extensions (everything else is in pyproject.toml): built where a compiler
is, skipped where not (``optional=True``), and the pure-Python code serves instead."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "magnetar.protocol._cframe",
            ["src/magnetar/protocol/_cframe.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "magnetar.protocol._crecords",
            ["src/magnetar/protocol/_crecords.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
