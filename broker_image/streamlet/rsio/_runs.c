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
 * runs.py's _run_python gives identical results (tests/rsio/test_rsio_runs.py checks that). */
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

static PyMethodDef methods[] = {
    {"on_next_run", on_next_run, METH_VARARGS, "A run of stored entries as RSIO frames."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runs", NULL, -1, methods};

PyMODINIT_FUNC PyInit__runs(void) { return PyModule_Create(&module); }
