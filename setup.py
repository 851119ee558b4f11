"""The optional C extension (everything else is in pyproject.toml): built where a compiler
is, skipped where not (``optional=True``), and the pure-Python codec serves instead."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "magnetar.protocol._cframe",
            ["src/magnetar/protocol/_cframe.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
