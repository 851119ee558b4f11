/* The bookie's record encoders in C: a run of journal records and a run of entry-log
 * records, each as one bytes object, or a run of journal records written into a buffer. Optional: magnetar.protocol.speedups loads this module
 * when it was built, and the journal and the entry log fall back to their pure-Python
 * encoders, which these must match byte for byte (tests/bookie/test_record_speedups.py
 * compares them).
 *
 * Journal record:   u32 len, u32 hcrc, u8 type, u64 ledger, i64 entry, i64 lac, u32 crc, payload
 *                   (hcrc: CRC32C of the file's id as a u64, then type..crc)
 * Entry-log record: u32 len, u64 ledger, i64 entry, i64 lac, u32 crc, payload
 * All little-endian. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define JOURNAL_HEADER 37
#define ENTRY_LOG_HEADER 32

/* ---- CRC32C (Castagnoli, reflected), a table per byte: the headers are 29 bytes -------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

/* The register after p[0..n) from c (start at 0xFFFFFFFF; the CRC is the result ^ 0xFFFFFFFF). */
static uint32_t crc32c_update(uint32_t c, const unsigned char *p, Py_ssize_t n) {
    while (n--)
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

static inline void put_u32le(unsigned char *out, uint32_t v) {
    for (int i = 0; i < 4; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

static inline void put_u64le(unsigned char *out, uint64_t v) {
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

/* ---- columns: an int for every record (or the first of consecutive ids), or a sequence -- */

typedef struct {
    PyObject *fast; /* a list or tuple of ints; NULL: the scalar */
    int64_t scalar;
    int counts_up; /* the scalar is the first id: record i has scalar + i */
} column;

static int column_init(column *col, PyObject *obj, int counts_up, int is_signed,
                       const char *name) {
    col->fast = NULL;
    col->counts_up = counts_up;
    if (PyLong_Check(obj)) {
        if (is_signed) {
            col->scalar = PyLong_AsLongLong(obj);
        } else {
            unsigned long long v = PyLong_AsUnsignedLongLong(obj);
            col->scalar = (int64_t)v;
        }
        return PyErr_Occurred() ? -1 : 0;
    }
    col->fast = PySequence_Fast(obj, name);
    return col->fast == NULL ? -1 : 0;
}

static int column_get(column *col, Py_ssize_t i, int is_signed, uint64_t *out) {
    if (col->fast == NULL) {
        *out = (uint64_t)(col->scalar + (col->counts_up ? (int64_t)i : 0));
        return 0;
    }
    PyObject *item = PySequence_Fast_GET_ITEM(col->fast, i);
    if (is_signed) {
        long long v = PyLong_AsLongLong(item);
        if (v == -1 && PyErr_Occurred())
            return -1;
        *out = (uint64_t)v;
    } else {
        unsigned long long v = PyLong_AsUnsignedLongLong(item);
        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *out = (uint64_t)v;
    }
    return 0;
}

static Py_ssize_t column_length(column *col) {
    return col->fast == NULL ? -1 : PySequence_Fast_GET_SIZE(col->fast);
}

/* ---- the encoder both record kinds share ------------------------------------------------- */

/* args: ledgers, entries, lacs, checksums, payloads. The records go into a new bytes object
 * (returned), or with target into target->buf at offset at (returned: the offset after
 * them; ValueError if they do not fit). */
static PyObject *encode_records(PyObject *const *args, int journal, int type, uint64_t file_id,
                                Py_buffer *target, Py_ssize_t at) {
    column ledgers, entries, lacs;
    PyObject *checksums = NULL, *payloads = NULL, *out = NULL;
    Py_buffer *views = NULL;
    Py_ssize_t n = 0, taken = 0;
    memset(&ledgers, 0, sizeof ledgers);
    memset(&entries, 0, sizeof entries);
    memset(&lacs, 0, sizeof lacs);
    if (column_init(&ledgers, args[0], 0, 0, "ledger ids: an int or a sequence") < 0 ||
        column_init(&entries, args[1], 1, 1, "entry ids: an int or a sequence") < 0 ||
        column_init(&lacs, args[2], 0, 1, "lacs: an int or a sequence") < 0)
        goto done;
    checksums = PySequence_Fast(args[3], "checksums: a sequence");
    payloads = PySequence_Fast(args[4], "payloads: a sequence");
    if (checksums == NULL || payloads == NULL)
        goto done;
    n = PySequence_Fast_GET_SIZE(payloads);
    if (PySequence_Fast_GET_SIZE(checksums) != n ||
        (column_length(&ledgers) >= 0 && column_length(&ledgers) != n) ||
        (column_length(&entries) >= 0 && column_length(&entries) != n) ||
        (column_length(&lacs) >= 0 && column_length(&lacs) != n)) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths");
        goto done;
    }
    views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t header = journal ? JOURNAL_HEADER : ENTRY_LOG_HEADER;
    unsigned char file_id_le[8];
    put_u64le(file_id_le, file_id);
    uint32_t file_crc = crc32c_update(0xFFFFFFFFu, file_id_le, 8);
    Py_ssize_t total = 0;
    for (; taken < n; taken++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(payloads, taken), &views[taken],
                               PyBUF_SIMPLE) < 0)
            goto done;
        if (views[taken].len > 0xFFFFFFFFll) {
            PyErr_SetString(PyExc_ValueError, "a payload longer than a u32 length");
            taken++;
            goto done;
        }
        total += header + views[taken].len;
    }
    unsigned char *p;
    if (target == NULL) {
        out = PyBytes_FromStringAndSize(NULL, total);
        if (out == NULL)
            goto done;
        p = (unsigned char *)PyBytes_AS_STRING(out);
    } else {
        if (at < 0 || at > target->len || total > target->len - at) {
            PyErr_SetString(PyExc_ValueError, "the records do not fit in the buffer there");
            goto done;
        }
        out = PyLong_FromSsize_t(at + total);
        if (out == NULL)
            goto done;
        p = (unsigned char *)target->buf + at;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t ledger, entry, lac, checksum;
        if (column_get(&ledgers, i, 0, &ledger) < 0 || column_get(&entries, i, 1, &entry) < 0 ||
            column_get(&lacs, i, 1, &lac) < 0)
            goto fail;
        checksum = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(checksums, i));
        if (checksum == (unsigned long)-1 && PyErr_Occurred())
            goto fail;
        if (checksum > 0xFFFFFFFFull) {
            PyErr_SetString(PyExc_OverflowError, "a checksum wider than 32 bits");
            goto fail;
        }
        Py_ssize_t len = views[i].len;
        put_u32le(p, (uint32_t)len);
        unsigned char *fields = p + (journal ? 9 : 4);
        put_u64le(fields, ledger);
        put_u64le(fields + 8, entry);
        put_u64le(fields + 16, lac);
        put_u32le(fields + 24, (uint32_t)checksum);
        if (journal) {
            p[8] = (unsigned char)type;
            put_u32le(p + 4, crc32c_update(file_crc, p + 8, JOURNAL_HEADER - 8) ^ 0xFFFFFFFFu);
        }
        memcpy(p + header, views[i].buf, (size_t)len);
        p += header + len;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    for (Py_ssize_t i = 0; i < taken; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_XDECREF(ledgers.fast);
    Py_XDECREF(entries.fast);
    Py_XDECREF(lacs.fast);
    Py_XDECREF(checksums);
    Py_XDECREF(payloads);
    return out;
}

PyDoc_STRVAR(journal_records_doc,
"journal_records(file_id, type, ledgers, entries, lacs, checksums, payloads) -> bytes\n\n"
"The journal records of payloads[i], back to back, for journal file file_id. ledgers and\n"
"lacs: an int for every record or a sequence; entries: the first of consecutive ids or a\n"
"sequence.");

/* args: file_id, type, then the columns; the records as encode_records makes them. */
static PyObject *journal_run(PyObject *const *args, Py_buffer *target, Py_ssize_t at) {
    unsigned long long file_id = PyLong_AsUnsignedLongLong(args[0]);
    if (file_id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    long type = PyLong_AsLong(args[1]);
    if (type == -1 && PyErr_Occurred())
        return NULL;
    if (type < 0 || type > 255) {
        PyErr_SetString(PyExc_ValueError, "a record type is a u8");
        return NULL;
    }
    return encode_records(args + 2, 1, (int)type, (uint64_t)file_id, target, at);
}

static PyObject *journal_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "journal_records takes 7 arguments");
        return NULL;
    }
    return journal_run(args, NULL, 0);
}

PyDoc_STRVAR(journal_records_into_doc,
"journal_records_into(buffer, at, file_id, type, ledgers, entries, lacs, checksums,\n"
"                     payloads) -> int\n\n"
"The bytes journal_records returns, written into the writable buffer at offset at instead;\n"
"returns the offset after them. ValueError, and nothing written, if they do not fit.");

static PyObject *journal_records_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "journal_records_into takes 9 arguments");
        return NULL;
    }
    Py_ssize_t at = PyLong_AsSsize_t(args[1]);
    if (at == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer target;
    if (PyObject_GetBuffer(args[0], &target, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *end = journal_run(args + 2, &target, at);
    PyBuffer_Release(&target);
    return end;
}

PyDoc_STRVAR(entry_log_records_doc,
"entry_log_records(ledgers, entries, lacs, checksums, payloads) -> bytes\n\n"
"The entry-log records of payloads[i], back to back (columns as journal_records).");

static PyObject *entry_log_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "entry_log_records takes 5 arguments");
        return NULL;
    }
    return encode_records(args, 0, 0, 0, NULL, 0);
}

static PyMethodDef methods[] = {
    {"journal_records", (PyCFunction)(void (*)(void))journal_records, METH_FASTCALL,
     journal_records_doc},
    {"journal_records_into", (PyCFunction)(void (*)(void))journal_records_into, METH_FASTCALL,
     journal_records_into_doc},
    {"entry_log_records", (PyCFunction)(void (*)(void))entry_log_records, METH_FASTCALL,
     entry_log_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crecords",
    "The bookie's record encoders in C (optional; see magnetar.protocol.speedups).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__crecords(void) {
    crc_init();
    return PyModule_Create(&module);
}
