/* The codec's hottest functions in C: the SEND command's fields, the decoder's loop over
 * a read's SEND frames, the SEND_RECEIPT and a run of MESSAGE headers. Optional:
 * magnetar.protocol.speedups loads this module when it was built and falls back to the
 * pure-Python functions of _convert and frame, which these must match byte for byte
 * (tests/protocol/test_speedups.py compares them). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- varints ------------------------------------------------------------------------- */

static inline Py_ssize_t put_varint(unsigned char *out, uint64_t v) {
    Py_ssize_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

static inline Py_ssize_t varint_size(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline void put_u32be(unsigned char *out, uint32_t v) {
    out[0] = (unsigned char)(v >> 24);
    out[1] = (unsigned char)(v >> 16);
    out[2] = (unsigned char)(v >> 8);
    out[3] = (unsigned char)v;
}

/* A uint64 field's value: ValueError for negative or too large values (as frame._uvarint). */
static int as_uint64(PyObject *obj, uint64_t *out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%R does not fit a uint64 field", obj);
        }
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* An int64 carried as uint64 (ledger and entry ids): two's complement for negative values,
 * ValueError outside [-2**63, 2**64) (as frame._varint). */
static int as_int64_bits(PyObject *obj, uint64_t *out) {
    int overflow = 0;
    long long s = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (s == -1 && PyErr_Occurred())
        return -1;
    if (overflow == 0) {
        *out = (uint64_t)s;
        return 0;
    }
    if (overflow > 0)
        return as_uint64(obj, out);
    PyErr_Format(PyExc_ValueError, "%R does not fit in 64 bits", obj);
    return -1;
}

/* ---- SEND ---------------------------------------------------------------------------- */

PyDoc_STRVAR(send_fields_doc,
"send_fields(data: bytes) -> tuple | None\n\n"
"_convert.send_fields_from_command_bytes: fields 1-8 of BaseCommand{type=SEND, send{...}}\n"
"as varints in any order, or None for any other shape.");

/* The fields of the SEND command in d[0:n], or None (another shape). */
static PyObject *parse_send_fields(const unsigned char *d, Py_ssize_t n) {
    if (n < 4 || d[0] != 0x08 || d[1] != 0x06 || d[2] != 0x32 || (Py_ssize_t)d[3] + 4 != n)
        Py_RETURN_NONE;
    uint64_t values[8] = {0, 0, 1, 0, 0, 0, 0, 0};
    int seen_pid = 0, seen_seq = 0;
    Py_ssize_t pos = 4;
    while (pos < n) {
        unsigned key = d[pos];
        unsigned number = key >> 3;
        if ((key & 7) || number < 1 || number > 8 || pos + 1 >= n)
            Py_RETURN_NONE;
        uint64_t value = d[pos + 1];
        pos += 2;
        if (value >= 0x80) {
            value &= 0x7F;
            unsigned shift = 7;
            for (;;) {
                if (pos >= n || shift > 63)
                    Py_RETURN_NONE;
                unsigned b = d[pos++];
                if (shift == 63 && (b & 0x7F) > 1)
                    Py_RETURN_NONE; /* would be 2**64 or more */
                value |= (uint64_t)(b & 0x7F) << shift;
                if (b < 0x80)
                    break;
                shift += 7;
            }
        }
        values[number - 1] = value;
        if (number == 1)
            seen_pid = 1;
        else if (number == 2)
            seen_seq = 1;
    }
    if (!seen_pid || !seen_seq)
        Py_RETURN_NONE;
    long num_messages = (long)(int32_t)(uint32_t)(values[2] & 0xFFFFFFFFu);
    return Py_BuildValue("(KKlKKKNN)", (unsigned long long)values[0],
                         (unsigned long long)values[1], num_messages,
                         (unsigned long long)values[3], (unsigned long long)values[4],
                         (unsigned long long)values[5], PyBool_FromLong(values[6] != 0),
                         PyBool_FromLong(values[7] != 0));
}

static PyObject *send_fields(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "send_fields takes bytes");
        return NULL;
    }
    return parse_send_fields((const unsigned char *)PyBytes_AS_STRING(arg),
                             PyBytes_GET_SIZE(arg));
}

static inline uint32_t get_u32be(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static PyObject *str_data, *str_checksum, *str_md_start, *str_md_end, *str_md;

PyDoc_STRVAR(scan_sends_doc,
"scan_sends(data, view, pos, max_frame, sends, entry_type) -> int\n\n"
"FrameDecoder._feed's loop over whole SEND frames of the usual shape in data (bytes;\n"
"view is memoryview(data)), from pos: each appended to sends as (fields, entry), the\n"
"entry built as entry_type(view[start:end]) would be. Returns the position of the first\n"
"frame left to the Python loop (incomplete, over max_frame, another command or shape, an\n"
"entry the constructor would refuse), or len(data).");

static PyObject *scan_sends(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6 || !PyBytes_Check(args[0]) || !PyList_Check(args[4]) ||
        !PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_sends(data: bytes, view, pos, max_frame, sends: list, type)");
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    PyObject *view = args[1], *sends = args[4];
    PyTypeObject *entry_type = (PyTypeObject *)args[5];
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]);
    long long max_frame = PyLong_AsLongLong(args[3]);
    if ((pos == -1 || max_frame == -1) && PyErr_Occurred())
        return NULL;
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos outside data");
        return NULL;
    }
    while (n - pos >= 4) {
        long long total = get_u32be(d + pos);
        if (total + 4 > max_frame)
            break;
        Py_ssize_t body = pos + 4;
        if (n - body < total)
            break;
        Py_ssize_t end = body + (Py_ssize_t)total;
        if (total <= 10 || d[body + 4] != 0x08 || d[body + 5] != 0x06)
            break;
        long long cmd_end = (long long)body + 4 + get_u32be(d + body);
        if (!(cmd_end < (long long)end - 1) || (d[cmd_end] == 0x0E && d[cmd_end + 1] == 0x02))
            break;
        /* the entry, checked as Entry.__init__ does (what it refuses, Python raises for) */
        const unsigned char *e = d + cmd_end;
        Py_ssize_t en = end - (Py_ssize_t)cmd_end, mpos = 0;
        int has_checksum = en >= 2 && e[0] == 0x0E && e[1] == 0x01;
        if (has_checksum) {
            if (en < 6)
                break;
            mpos = 6;
        }
        if (en - mpos < 4)
            break;
        uint32_t md_size = get_u32be(e + mpos);
        mpos += 4;
        if ((Py_ssize_t)md_size > en - mpos)
            break;
        PyObject *fields = parse_send_fields(d + body + 4, (Py_ssize_t)cmd_end - body - 4);
        if (fields == NULL)
            return NULL;
        if (fields == Py_None) {
            Py_DECREF(fields);
            break;
        }
        PyObject *entry = NULL, *item = NULL, *tmp = NULL;
        PyObject *data = PySequence_GetSlice(view, (Py_ssize_t)cmd_end, end);
        if (data == NULL)
            goto fail;
        entry = entry_type->tp_alloc(entry_type, 0);
        if (entry == NULL || PyObject_SetAttr(entry, str_data, data) < 0)
            goto fail;
        tmp = has_checksum ? PyLong_FromUnsignedLong(get_u32be(e + 2)) : Py_NewRef(Py_None);
        if (tmp == NULL || PyObject_SetAttr(entry, str_checksum, tmp) < 0)
            goto fail;
        Py_SETREF(tmp, PyLong_FromSsize_t(mpos));
        if (tmp == NULL || PyObject_SetAttr(entry, str_md_start, tmp) < 0)
            goto fail;
        Py_SETREF(tmp, PyLong_FromSsize_t(mpos + (Py_ssize_t)md_size));
        if (tmp == NULL || PyObject_SetAttr(entry, str_md_end, tmp) < 0 ||
            PyObject_SetAttr(entry, str_md, Py_None) < 0)
            goto fail;
        item = PyTuple_Pack(2, fields, entry);
        if (item == NULL || PyList_Append(sends, item) < 0)
            goto fail;
        Py_DECREF(item);
        Py_DECREF(tmp);
        Py_DECREF(entry);
        Py_DECREF(data);
        Py_DECREF(fields);
        pos = end;
        continue;
    fail:
        Py_XDECREF(item);
        Py_XDECREF(tmp);
        Py_XDECREF(entry);
        Py_XDECREF(data);
        Py_DECREF(fields);
        return NULL;
    }
    return PyLong_FromSsize_t(pos);
}

/* ---- SEND_RECEIPT -------------------------------------------------------------------- */

PyDoc_STRVAR(send_receipt_at_doc,
"send_receipt_at(producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id) -> bytes\n\n"
"frame.encode_send_receipt_at: the SEND_RECEIPT frame, message_id{ledger_id, entry_id}.");

static PyObject *send_receipt_at(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "send_receipt_at takes 5 arguments");
        return NULL;
    }
    uint64_t producer_id, sequence_id, ledger_id, entry_id, highest;
    if (as_uint64(args[0], &producer_id) < 0 || as_uint64(args[1], &sequence_id) < 0 ||
        as_int64_bits(args[2], &ledger_id) < 0 || as_int64_bits(args[3], &entry_id) < 0 ||
        as_uint64(args[4], &highest) < 0)
        return NULL;
    /* 8 header + 3 type + 2 length + 4 x (1 tag + 10 varint) + 1 tag + 1 length: < 64 */
    unsigned char mid[32], msg[64], out[96];
    Py_ssize_t m = 0, k = 0, o = 8;
    mid[m++] = 0x08;
    m += put_varint(mid + m, ledger_id);
    mid[m++] = 0x10;
    m += put_varint(mid + m, entry_id);
    msg[k++] = 0x08;
    k += put_varint(msg + k, producer_id);
    msg[k++] = 0x10;
    k += put_varint(msg + k, sequence_id);
    msg[k++] = 0x1A;
    msg[k++] = (unsigned char)m;
    memcpy(msg + k, mid, (size_t)m);
    k += m;
    if (highest) {
        msg[k++] = 0x20;
        k += put_varint(msg + k, highest);
    }
    out[o++] = 0x08;
    out[o++] = 0x07; /* CommandType.SEND_RECEIPT */
    out[o++] = 0x3A;
    o += put_varint(out + o, (uint64_t)k);
    memcpy(out + o, msg, (size_t)k);
    o += k;
    put_u32be(out, (uint32_t)(o - 4));
    put_u32be(out + 4, (uint32_t)(o - 8));
    return PyBytes_FromStringAndSize((const char *)out, o);
}

/* ---- MESSAGE ------------------------------------------------------------------------- */

PyDoc_STRVAR(messages_at_doc,
"messages_at(consumer_id, partition, positions, entries, sizes) -> list | None\n\n"
"frame.encode_messages_at without redelivery counts: [header, entry, header, entry, ...],\n"
"or None when an id is negative or out of range (the caller takes the general path).");

static PyObject *messages_at(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "messages_at takes 5 arguments");
        return NULL;
    }
    int overflow = 0, overflow2 = 0;
    long long consumer_id = PyLong_AsLongLongAndOverflow(args[0], &overflow);
    if (consumer_id == -1 && PyErr_Occurred())
        return NULL;
    long long partition = PyLong_AsLongLongAndOverflow(args[1], &overflow2);
    if (partition == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || overflow2 || consumer_id < 0 || partition < -1)
        Py_RETURN_NONE;
    PyObject *positions = PySequence_Fast(args[2], "positions must be a sequence");
    if (positions == NULL)
        return NULL;
    PyObject *entries = PySequence_Fast(args[3], "entries must be a sequence");
    PyObject *sizes = entries ? PySequence_Fast(args[4], "sizes must be a sequence") : NULL;
    PyObject *out = NULL;
    if (sizes == NULL)
        goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(positions);
    if (PySequence_Fast_GET_SIZE(entries) != count || PySequence_Fast_GET_SIZE(sizes) != count) {
        PyErr_SetString(PyExc_ValueError, "positions, entries and sizes differ in length");
        goto done;
    }
    out = PyList_New(2 * count);
    if (out == NULL)
        goto done;
    unsigned char cid[16], tail[16];
    Py_ssize_t cid_len = 0, tail_len = 0;
    cid[cid_len++] = 0x08;
    cid_len += put_varint(cid + cid_len, (uint64_t)consumer_id);
    cid[cid_len++] = 0x12;
    if (partition != -1) {
        tail[tail_len++] = 0x18;
        tail_len += put_varint(tail + tail_len, (uint64_t)partition);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pos = PySequence_Fast_GET_ITEM(positions, i);
        if (!PyTuple_Check(pos) || PyTuple_GET_SIZE(pos) != 2) {
            PyErr_SetString(PyExc_TypeError, "a position is a (ledger_id, entry_id) tuple");
            goto fail;
        }
        long long ledger_id = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(pos, 0), &overflow);
        if (ledger_id == -1 && PyErr_Occurred())
            goto fail;
        long long entry_id = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(pos, 1), &overflow2);
        if (entry_id == -1 && PyErr_Occurred())
            goto fail;
        Py_ssize_t size = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(sizes, i));
        if (size == -1 && PyErr_Occurred())
            goto fail;
        if (overflow || overflow2 || ledger_id < 0 || entry_id < 0 || size < 0) {
            /* outside the common shape: the caller takes the general path */
            Py_DECREF(out);
            Py_INCREF(Py_None);
            out = Py_None;
            goto done;
        }
        unsigned char mid[40], msg[80], head[112];
        Py_ssize_t m = 0, k = 0, h = 8;
        mid[m++] = 0x08;
        m += put_varint(mid + m, (uint64_t)ledger_id);
        mid[m++] = 0x10;
        m += put_varint(mid + m, (uint64_t)entry_id);
        memcpy(mid + m, tail, (size_t)tail_len);
        m += tail_len;
        memcpy(msg, cid, (size_t)cid_len);
        k = cid_len;
        msg[k++] = (unsigned char)m;
        memcpy(msg + k, mid, (size_t)m);
        k += m;
        head[h++] = 0x08;
        head[h++] = 0x09; /* CommandType.MESSAGE */
        head[h++] = 0x4A;
        h += put_varint(head + h, (uint64_t)k);
        memcpy(head + h, msg, (size_t)k);
        h += k;
        uint64_t cmd_size = (uint64_t)(h - 8);
        uint64_t total = 4 + cmd_size + (uint64_t)size;
        if (total > 0xFFFFFFFFu) {
            PyErr_SetString(PyExc_ValueError, "frame too large");
            goto fail;
        }
        put_u32be(head, (uint32_t)total);
        put_u32be(head + 4, (uint32_t)cmd_size);
        PyObject *header = PyBytes_FromStringAndSize((const char *)head, h);
        if (header == NULL)
            goto fail;
        PyList_SET_ITEM(out, 2 * i, header);
        PyObject *entry = PySequence_Fast_GET_ITEM(entries, i);
        Py_INCREF(entry);
        PyList_SET_ITEM(out, 2 * i + 1, entry);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(positions);
    Py_XDECREF(entries);
    Py_XDECREF(sizes);
    return out;
}

static PyMethodDef methods[] = {
    {"send_fields", send_fields, METH_O, send_fields_doc},
    {"scan_sends", (PyCFunction)(void (*)(void))scan_sends, METH_FASTCALL, scan_sends_doc},
    {"send_receipt_at", (PyCFunction)(void (*)(void))send_receipt_at, METH_FASTCALL,
     send_receipt_at_doc},
    {"messages_at", (PyCFunction)(void (*)(void))messages_at, METH_FASTCALL, messages_at_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cframe",
    "The codec's hottest functions in C (optional; see magnetar.protocol.speedups).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cframe(void) {
    str_data = PyUnicode_InternFromString("data");
    str_checksum = PyUnicode_InternFromString("checksum");
    str_md_start = PyUnicode_InternFromString("_metadata_start");
    str_md_end = PyUnicode_InternFromString("_metadata_end");
    str_md = PyUnicode_InternFromString("_metadata");
    if (!str_data || !str_checksum || !str_md_start || !str_md_end || !str_md)
        return NULL;
    return PyModule_Create(&module);
}
