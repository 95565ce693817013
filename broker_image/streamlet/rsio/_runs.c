/* streamlet.rsio._runs: a subscription's frames for a run of stored records in one call, the
 * per-element loop of an RSIO subscription.
 *
 * on_next_run(sub, data, max_count, max_bytes, split, element_size) walks the simple entries
 * at the start of `data` (a chunk's data section from an entry's start) and returns
 *   (frames, n, pos)
 * the frames of the first `n` entries joined, and where the next entry starts. It takes at
 * most `max_count` entries, none after the one that brings their bodies' bytes to `max_bytes`,
 * and stops before a sub-entry batch, a body longer than `split` and (with `element_size`) a
 * body of another size. Each entry is an onNext frame (varint length, type 7, varint sub, the
 * body); with `element_size`, each group of max(split / element_size, 1) entries is one
 * onNextPacked (type 10, varint sub, varint count, the bodies), a group of one an onNext.
 *
 * cut_on_next(data, sub, max_count, max_element) is an append's way in: the whole onNext
 * frames of subscriber `sub` that follow each other at the start of `data` (a read), at most
 * `max_count`, none past an element longer than `max_element`, as (entries, n, used): their
 * elements each behind a simple entry's header (a u32 length), how many, and the bytes of
 * `data` they took. It stops at anything else (another type or subscriber, a frame not whole,
 * a varint past 10 bytes or 64 bits): the general way takes it from there.
 * runs.py's _run_python and _cut_python give identical results (tests/rsio/test_rsio_runs.py checks that). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int varint_len(unsigned long long v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *put_varint(unsigned char *o, unsigned long long v) {
    while (v >= 0x80) {
        *o++ = (unsigned char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *o++ = (unsigned char)v;
    return o;
}

/* A group's frame: onNext for one element, else onNextPacked. */
static unsigned char *put_group(unsigned char *o, const unsigned char *sub, int sublen,
                                const unsigned char *bodies, long long count, long long esize,
                                int stride) {
    if (count == 1) {
        o = put_varint(o, 1 + sublen + esize);
        *o++ = 7;
        memcpy(o, sub, sublen);
        o += sublen;
    } else {
        o = put_varint(o, 1 + sublen + varint_len(count) + count * esize);
        *o++ = 10;
        memcpy(o, sub, sublen);
        o += sublen;
        o = put_varint(o, count);
    }
    for (long long i = 0; i < count; i++) {
        memcpy(o, bodies + i * stride + 4, esize);
        o += esize;
    }
    return o;
}

static long long group_size(int sublen, long long count, long long esize) {
    long long body = count == 1 ? 1 + sublen + esize
                                : 1 + sublen + varint_len(count) + count * esize;
    return varint_len(body) + body;
}

static PyObject *on_next_run(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *data;
    PyObject *subobj;
    long long max_count, max_bytes, split, esize;
    if (!PyArg_ParseTuple(args, "O!OLLLL", &PyLong_Type, &subobj, &data, &max_count, &max_bytes,
                          &split, &esize))
        return NULL;
    unsigned long long sub = PyLong_AsUnsignedLongLong(subobj);
    if (sub == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        sub = 0;
        max_count = -1; /* refused below, as the twin refuses it */
    }
    if (max_count < 0 || split < 1 || esize < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative id, count or size, or a split under 1");
        return NULL;
    }
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    unsigned char subv[10];
    int sublen = (int)(put_varint(subv, sub) - subv);
    /* pass 1: how many entries, and the bytes of their frames */
    long long n = 0, size = 0, total = 0;
    long long per = esize ? (split / esize > 1 ? split / esize : 1) : 1;
    while (pos < end && n < max_count && size < max_bytes) {
        if (p[pos] & 0x80)
            break;
        if (end - pos < 4) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "truncated entry header");
            return NULL;
        }
        long long length = be32(p + pos);
        if (length > end - pos - 4) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "truncated entry");
            return NULL;
        }
        if (length > split || (esize && length != esize))
            break;
        if (!esize) {
            long long body = 1 + sublen + length;
            total += varint_len(body) + body;
        }
        pos += 4 + length;
        size += length;
        n++;
    }
    if (esize && n) {
        total = (n / per) * group_size(sublen, per, esize);
        if (n % per)
            total += group_size(sublen, n % per, esize);
    }
    PyObject *frames = PyBytes_FromStringAndSize(NULL, total);
    if (frames == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* pass 2: the frames */
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(frames);
    Py_ssize_t at = 0;
    if (esize) {
        int stride = (int)(4 + esize);
        for (long long done = 0; done < n; done += per) {
            long long count = n - done < per ? n - done : per;
            o = put_group(o, subv, sublen, p + at, count, esize, stride);
            at += count * stride;
        }
    } else {
        for (long long i = 0; i < n; i++) {
            long long length = be32(p + at);
            o = put_varint(o, 1 + sublen + length);
            *o++ = 7;
            memcpy(o, subv, sublen);
            o += sublen;
            memcpy(o, p + at + 4, length);
            o += length;
            at += 4 + length;
        }
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NLn)", frames, n, pos);
}

/* A varint at p[*pos..end): 1 and *pos moved past it, 0 if it does not end there or is past
 * 10 bytes or 64 bits. */
static int get_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                      unsigned long long *out) {
    unsigned long long v = 0;
    Py_ssize_t i = *pos;
    for (int k = 0; k < 10 && i < end; k++, i++) {
        unsigned char b = p[i];
        if (k == 9 && b > 1)
            return 0;
        v |= (unsigned long long)(b & 0x7f) << (7 * k);
        if (!(b & 0x80)) {
            *out = v;
            *pos = i + 1;
            return 1;
        }
    }
    return 0;
}

static PyObject *cut_on_next(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *data, *subobj;
    long long max_count, max_element;
    if (!PyArg_ParseTuple(args, "OO!LL", &data, &PyLong_Type, &subobj, &max_count, &max_element))
        return NULL;
    unsigned long long sub = PyLong_AsUnsignedLongLong(subobj);
    if ((sub == (unsigned long long)-1 && PyErr_Occurred()) || max_count < 0 || max_element < 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "a negative id, count or size");
        return NULL;
    }
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    long long n = 0, total = 0;
    /* pass 1: how many whole onNext frames of `sub` in a row, and their elements' bytes */
    while (n < max_count && pos < end) {
        Py_ssize_t at = pos, stop;
        unsigned long long size, s;
        if (!get_varint(p, &at, end, &size) || size > (unsigned long long)(end - at))
            break;
        stop = at + (Py_ssize_t)size;
        if (size < 1 || p[at] != 7)
            break;
        at++;
        if (!get_varint(p, &at, stop, &s) || s != sub || stop - at > max_element)
            break;
        total += 4 + (stop - at);
        n++;
        pos = stop;
    }
    PyObject *entries = PyBytes_FromStringAndSize(NULL, total);
    if (entries == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* pass 2: each element behind its simple entry header */
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(entries);
    Py_ssize_t at = 0;
    for (long long i = 0; i < n; i++) {
        unsigned long long size, s;
        get_varint(p, &at, end, &size);
        Py_ssize_t stop = at + (Py_ssize_t)size;
        at++;
        get_varint(p, &at, stop, &s);
        uint32_t len = (uint32_t)(stop - at);
        o[0] = (unsigned char)(len >> 24);
        o[1] = (unsigned char)(len >> 16);
        o[2] = (unsigned char)(len >> 8);
        o[3] = (unsigned char)len;
        memcpy(o + 4, p + at, len);
        o += 4 + len;
        at = stop;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NLn)", entries, n, pos);
}

static PyMethodDef methods[] = {
    {"on_next_run", on_next_run, METH_VARARGS, "A run of stored entries as RSIO frames."},
    {"cut_on_next", cut_on_next, METH_VARARGS, "A run of onNext frames as simple entries."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runs", NULL, -1, methods};

PyMODINIT_FUNC PyInit__runs(void) { return PyModule_Create(&module); }
