/* streamlet.storage._entries: a chunk's simple entries cut out in bulk, the one per-record loop
 * of SBP's FETCH (each record batch is one simple entry; its answer lists every entry's length
 * and sends the bodies without their headers).
 *
 * cut_simple(data, offset, start, max_bytes, size, taken, join) walks the simple entries of a
 * chunk's data section whose first entry has offset `offset`, skips those before `start`, and
 * takes the rest while the bytes taken stay within `max_bytes` (`size` already taken before;
 * the first entry of a read is always taken, `taken` says whether one was). It returns
 *   (first, count, lengths, bodies, size, stop, pos, offset)
 * `first` the offset of the first entry taken (-1: none), `lengths` their sizes as native int32,
 * `bodies` their bodies joined (with `join` false: `lengths` is empty and `bodies` the entries
 * taken as they are, a slice of `data`, no copy), `stop` 0 (the data ended), 1 (max_bytes
 * reached) or 2 (a sub-entry batch at byte `pos`, offset `offset`: for the general reader).
 *
 * join_simple(payload, lengths) is the other way: the bodies of `payload`, `lengths` (a list of
 * ints, or little-endian int32s packed in a buffer) long, each behind its simple entry
 * header; a chunk's data section as is.
 * entries.py has the same functions in Python; both must give identical results
 * (tests/storage/test_entries.py checks that). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* How many entries ahead the walk asks for a header (__builtin_prefetch where the compiler
 * has it). Measured on a chunk just copied, as a pread leaves it: 17-22 -> 4.5-5.4 ns per
 * 100-byte entry, 8-11 -> 5-6 per 1,000-byte one (8 ahead: 8-11; 64: no better). */
#define PREFETCH_AHEAD 32
#if defined(__GNUC__)
#define PREFETCH(at) __builtin_prefetch(at)
#else
#define PREFETCH(at) ((void)(at))
#endif

static PyObject *cut_simple(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *data;
    long long offset, start, max_bytes, size;
    int taken, join = 1;
    if (!PyArg_ParseTuple(args, "OLLLLp|p", &data, &offset, &start, &max_bytes, &size, &taken,
                          &join))
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    PyObject *lengths = NULL, *bodies = NULL, *result = NULL;
    /* pass 1: where the cut starts and ends, and how much it holds */
    long long first = -1, count = 0, total = 0;
    Py_ssize_t from = -1;
    int stop = 0;
    while (pos < end) {
        if (p[pos] & 0x80) {
            stop = 2;
            break;
        }
        if (end - pos < 4) {
            PyErr_SetString(PyExc_ValueError, "truncated entry header");
            goto done;
        }
        Py_ssize_t n = (Py_ssize_t)be32(p + pos);
        if (n > end - pos - 4) {
            PyErr_SetString(PyExc_ValueError, "truncated entry");
            goto done;
        }
        /* Each header's place depends on the one before, so the walk would wait on memory at
         * every entry; entries of one size are usual, so ask now for where the header
         * PREFETCH_AHEAD entries on would be if they were all this size. */
        if (n < end / PREFETCH_AHEAD && pos + PREFETCH_AHEAD * (4 + n) < end)
            PREFETCH(p + pos + PREFETCH_AHEAD * (4 + n));
        if (offset >= start) {
            if ((taken || count) && size + n > max_bytes) {
                stop = 1;
                break;
            }
            if (from < 0) {
                from = pos;
                first = offset;
            }
            count += 1;
            total += n;
            size += n;
        }
        offset += 1;
        pos += 4 + n;
    }
    if (!join) { /* the entries as they are: a slice of data */
        lengths = PyBytes_FromStringAndSize(NULL, 0);
        bodies = PySequence_GetSlice(data, from < 0 ? pos : from, pos);
        if (lengths != NULL && bodies != NULL)
            result = Py_BuildValue("(LLOOLinL)", first, count, lengths, bodies, size, stop, pos,
                                   offset);
        goto done;
    }
    /* pass 2: the lengths and the bodies */
    lengths = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 4);
    bodies = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (lengths == NULL || bodies == NULL)
        goto done;
    int32_t *out_len = (int32_t *)PyBytes_AS_STRING(lengths);
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(bodies);
    Py_ssize_t at = from;
    for (long long i = 0; i < count; i++) {
        uint32_t n = be32(p + at);
        memcpy(out_len + i, &n, 4);
        memcpy(out, p + at + 4, n);
        out += n;
        at += 4 + (Py_ssize_t)n;
    }
    result = Py_BuildValue("(LLOOLinL)", first, count, lengths, bodies, size, stop, pos, offset);
done:
    Py_XDECREF(lengths);
    Py_XDECREF(bodies);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *join_simple(PyObject *self, PyObject *args) {
    Py_buffer view, packed = {0};
    PyObject *lengths, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*O", &view, &lengths))
        return NULL;
    int listed = PyList_Check(lengths);
    Py_ssize_t n, pos = 0;
    if (listed)
        n = PyList_GET_SIZE(lengths);
    else if (PyObject_GetBuffer(lengths, &packed, PyBUF_SIMPLE) < 0)
        goto done;
    else if (packed.len % 4) {
        PyErr_SetString(PyExc_ValueError, "packed lengths not a whole number of int32");
        goto done;
    } else
        n = packed.len / 4;
    if (n > (PY_SSIZE_T_MAX - view.len) / 4) {
        PyErr_SetString(PyExc_ValueError, "too many entries");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, view.len + 4 * n);
    if (out == NULL)
        goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *le = packed.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long size;
        if (listed) {
            size = PyLong_AsLongLong(PyList_GET_ITEM(lengths, i));
            if (size == -1 && PyErr_Occurred())
                goto fail;
        } else
            size = (int32_t)((uint32_t)le[4 * i] | (uint32_t)le[4 * i + 1] << 8 |
                             (uint32_t)le[4 * i + 2] << 16 | (uint32_t)le[4 * i + 3] << 24);
        if (size < 0 || size >= 0x80000000LL || size > view.len - pos) {
            PyErr_Format(PyExc_ValueError, "entry %zd: %lld bytes, %zd left", i, size,
                         view.len - pos);
            goto fail;
        }
        o[0] = size >> 24; o[1] = size >> 16; o[2] = size >> 8; o[3] = size;
        memcpy(o + 4, (const unsigned char *)view.buf + pos, size);
        o += 4 + size;
        pos += size;
    }
    if (pos != view.len) {
        PyErr_Format(PyExc_ValueError, "%zd bytes left after the entries", view.len - pos);
        goto fail;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    if (packed.obj)
        PyBuffer_Release(&packed);
    PyBuffer_Release(&view);
    return out;
}

/* consecutive_ids(first, n): n publishing ids from `first`, each a big-endian u64 (a publish
 * batch's id array, as a PublishConfirm carries it). */
static PyObject *consecutive_ids(PyObject *self, PyObject *args) {
    unsigned long long first;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "Kn", &first, &n))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative count");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 8);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long v = first + (unsigned long long)i;
        for (int b = 7; b >= 0; b--) {
            p[8 * i + b] = (unsigned char)v;
            v >>= 8;
        }
    }
    return out;
}

/* simple_prefix(data, max_entries, max_bytes): how many of the simple entries at the start of
 * `data` are taken, at most max_entries of them within max_bytes (the first always), and the
 * bytes they fill: (n, pos). ValueError at a sub-entry batch or an entry cut short. */
static PyObject *simple_prefix(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t max_entries, max_bytes;
    if (!PyArg_ParseTuple(args, "y*nn", &b, &max_entries, &max_bytes))
        return NULL;
    const unsigned char *d = b.buf;
    Py_ssize_t len = b.len, pos = 0, n = 0;
    while (n < max_entries && pos < len) {
        if ((d[pos] & 0x80) || len - pos < 4) {
            PyBuffer_Release(&b);
            PyErr_SetString(PyExc_ValueError, "not a simple entry");
            return NULL;
        }
        Py_ssize_t size = 4 + (Py_ssize_t)be32(d + pos);
        if (size > len - pos) {
            PyBuffer_Release(&b);
            PyErr_SetString(PyExc_ValueError, "truncated entry");
            return NULL;
        }
        if (n && pos + size > max_bytes)
            break;
        pos += size;
        n++;
    }
    PyBuffer_Release(&b);
    return Py_BuildValue("nn", n, pos);
}

static PyMethodDef methods[] = {
    {"consecutive_ids", consecutive_ids, METH_VARARGS, "Publishing ids first..first+n-1."},
    {"simple_prefix", simple_prefix, METH_VARARGS, "The simple entries a cut takes."},
    {"cut_simple", cut_simple, METH_VARARGS, "Cut a chunk's simple entries out in bulk."},
    {"join_simple", join_simple, METH_VARARGS, "Join bodies as simple entries."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_entries", NULL, -1, methods};

PyMODINIT_FUNC PyInit__entries(void) { return PyModule_Create(&module); }
