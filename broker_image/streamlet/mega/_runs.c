/* streamlet.mega._runs: MEGA's pipelined requests cut in runs and answered in runs, the
 * per-request loops of its hot path (runs.py has the same functions in Python; both must give
 * identical results: tests/mega/test_mega_runs.py).
 *
 * produce_run(frame, ahead, max_payload): `frame` a whole PRODUCE; the PRODUCEs to the same
 * topic that follow it whole in `ahead` (a read's bytes not handed out yet), each payload at
 * most max_payload: (bytes of `ahead` taken, correlation ids packed u32, their payloads joined
 * as simple entries: each PRODUCE's length and payload as sent). None: `frame` is not one.
 * consume_run(frame, ahead): the same for CONSUMEs of consecutive offsets: (taken, correlation
 * ids, the first offset).
 * produced_answers(corrs, timestamp, offset): PRODUCE's success answers, offsets counting up.
 * consumed_answers(corrs, timestamp, entries, positions, index): CONSUME's success answers, the
 * i-th one's payload entries[positions[index + i] : positions[index + i + 1]] (native int64s).
 * simple_positions(data): where each simple entry of a chunk's data starts, and its end
 * (native int64s); None at a sub-entry batch or an entry cut short. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { PRODUCE = 1, CONSUME = 2, HEAD = 9, SUCCESS = 13 };

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static inline void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* The length of the fixed part of `frame` (header, topic, timestamp) when it is a request of
 * `kind` at least that long plus `tail`; -1 otherwise. */
static Py_ssize_t fixed_of(const unsigned char *f, Py_ssize_t len, int kind, Py_ssize_t tail) {
    if (len < HEAD || f[4] != kind)
        return -1;
    Py_ssize_t fixed = HEAD + (Py_ssize_t)be32(f + 5) + 8;
    return len >= fixed + tail ? fixed : -1;
}

/* Whether the request at `q` (with `left` bytes there) has `f`'s type and topic and its fixed
 * part and `tail` more bytes are there. */
static inline int same(const unsigned char *q, Py_ssize_t left, const unsigned char *f,
                       Py_ssize_t fixed, Py_ssize_t tail) {
    return left >= fixed + tail && q[4] == f[4] && memcmp(q + 5, f + 5, fixed - 8 - 5) == 0;
}

static PyObject *produce_run(PyObject *self, PyObject *args) {
    Py_buffer fb, ab;
    Py_ssize_t max_payload;
    if (!PyArg_ParseTuple(args, "y*y*n:produce_run", &fb, &ab, &max_payload))
        return NULL;
    PyObject *out = NULL;
    const unsigned char *f = fb.buf, *a = ab.buf;
    Py_ssize_t alen = ab.len;
    Py_ssize_t fixed = fixed_of(f, fb.len, PRODUCE, 4);
    if (fixed < 0 || fixed + 4 + (Py_ssize_t)be32(f + fixed) != fb.len) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t pos = 0, n = 1, total = fb.len - fixed;
    while (same(a + pos, alen - pos, f, fixed, 4)) {
        Py_ssize_t size = be32(a + pos + fixed);
        if (size > max_payload || alen - pos - fixed - 4 < size)
            break;
        pos += fixed + 4 + size;
        total += 4 + size;
        n++;
    }
    PyObject *corrs = PyBytes_FromStringAndSize(NULL, 4 * n);
    PyObject *entries = corrs ? PyBytes_FromStringAndSize(NULL, total) : NULL;
    if (entries == NULL) {
        Py_XDECREF(corrs);
        goto done;
    }
    unsigned char *c = (unsigned char *)PyBytes_AS_STRING(corrs);
    unsigned char *e = (unsigned char *)PyBytes_AS_STRING(entries);
    memcpy(c, f, 4);
    memcpy(e, f + fixed, fb.len - fixed);
    c += 4;
    e += fb.len - fixed;
    for (Py_ssize_t at = 0; at < pos;) {
        Py_ssize_t entry = 4 + (Py_ssize_t)be32(a + at + fixed);
        memcpy(c, a + at, 4);
        memcpy(e, a + at + fixed, entry);
        c += 4;
        e += entry;
        at += fixed + entry;
    }
    out = Py_BuildValue("nNN", pos, corrs, entries);
done:
    PyBuffer_Release(&fb);
    PyBuffer_Release(&ab);
    return out;
}

static PyObject *consume_run(PyObject *self, PyObject *args) {
    Py_buffer fb, ab;
    if (!PyArg_ParseTuple(args, "y*y*:consume_run", &fb, &ab))
        return NULL;
    PyObject *out = NULL;
    const unsigned char *f = fb.buf, *a = ab.buf;
    Py_ssize_t alen = ab.len;
    Py_ssize_t fixed = fixed_of(f, fb.len, CONSUME, 4);
    if (fixed < 0 || fixed + 4 != fb.len) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    uint64_t first = be32(f + fixed), next = first + 1;
    Py_ssize_t pos = 0, n = 1;
    while (same(a + pos, alen - pos, f, fixed, 4) && be32(a + pos + fixed) == next) {
        pos += fixed + 4;
        next++;
        n++;
    }
    PyObject *corrs = PyBytes_FromStringAndSize(NULL, 4 * n);
    if (corrs == NULL)
        goto done;
    unsigned char *c = (unsigned char *)PyBytes_AS_STRING(corrs);
    memcpy(c, f, 4);
    for (Py_ssize_t i = 1; i < n; i++)
        memcpy(c + 4 * i, a + (i - 1) * (fixed + 4), 4);
    out = Py_BuildValue("nNK", pos, corrs, (unsigned long long)first);
done:
    PyBuffer_Release(&fb);
    PyBuffer_Release(&ab);
    return out;
}

static PyObject *produced_answers(PyObject *self, PyObject *args) {
    Py_buffer cb;
    unsigned long long ts, offset;
    if (!PyArg_ParseTuple(args, "y*KK:produced_answers", &cb, &ts, &offset))
        return NULL;
    PyObject *out = NULL;
    if (cb.len % 4) {
        PyErr_SetString(PyExc_ValueError, "correlation ids not a whole number of u32");
        goto done;
    }
    Py_ssize_t n = cb.len / 4;
    out = PyBytes_FromStringAndSize(NULL, 21 * n);
    if (out == NULL)
        goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *c = cb.buf;
    for (Py_ssize_t i = 0; i < n; i++, p += 21) {
        memcpy(p, c + 4 * i, 4);
        p[4] = 1;
        put64(p + 5, ts);
        put64(p + 13, offset + (uint64_t)i);
    }
done:
    PyBuffer_Release(&cb);
    return out;
}

static PyObject *consumed_answers(PyObject *self, PyObject *args) {
    Py_buffer cb, eb, pb;
    unsigned long long ts;
    Py_ssize_t index;
    if (!PyArg_ParseTuple(args, "y*Ky*y*n:consumed_answers", &cb, &ts, &eb, &pb, &index))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = cb.len / 4, npos = pb.len / 8;
    if (cb.len % 4 || pb.len % 8) {
        PyErr_SetString(PyExc_ValueError, "correlation ids or positions cut short");
        goto done;
    }
    if (index < 0 || index + n + 1 > npos) {
        PyErr_SetString(PyExc_ValueError, "answers past the positions");
        goto done;
    }
    const unsigned char *c = cb.buf, *e = eb.buf;
    int64_t *at = PyMem_Malloc((n + 1) * sizeof(int64_t));
    if (at == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(at, (const char *)pb.buf + 8 * index, (n + 1) * sizeof(int64_t));
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (at[i] < 0 || at[i] > at[i + 1] || at[i + 1] > eb.len) {
            PyErr_SetString(PyExc_ValueError, "a position outside the entries");
            PyMem_Free(at);
            goto done;
        }
        total += SUCCESS + (Py_ssize_t)(at[i + 1] - at[i]);
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out != NULL) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t size = (Py_ssize_t)(at[i + 1] - at[i]);
            memcpy(p, c + 4 * i, 4);
            p[4] = 1;
            put64(p + 5, ts);
            memcpy(p + SUCCESS, e + at[i], size);
            p += SUCCESS + size;
        }
    }
    PyMem_Free(at);
done:
    PyBuffer_Release(&cb);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&pb);
    return out;
}

static PyObject *simple_positions(PyObject *self, PyObject *args) {
    Py_buffer db;
    if (!PyArg_ParseTuple(args, "y*:simple_positions", &db))
        return NULL;
    PyObject *out = NULL;
    const unsigned char *d = db.buf;
    Py_ssize_t len = db.len, pos = 0, n = 0;
    while (pos < len) {
        if ((d[pos] & 0x80) || len - pos < 4 || (Py_ssize_t)be32(d + pos) > len - pos - 4) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        pos += 4 + (Py_ssize_t)be32(d + pos);
        n++;
    }
    out = PyBytes_FromStringAndSize(NULL, 8 * (n + 1));
    if (out == NULL)
        goto done;
    char *at = PyBytes_AS_STRING(out);
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++, at += 8) {
        memcpy(at, &v, 8);
        v += 4 + (int64_t)be32(d + v);
    }
    memcpy(at, &v, 8);
done:
    PyBuffer_Release(&db);
    return out;
}

static PyMethodDef methods[] = {
    {"produce_run", produce_run, METH_VARARGS, "A run of PRODUCEs to one topic, cut."},
    {"consume_run", consume_run, METH_VARARGS, "A run of CONSUMEs of consecutive offsets, cut."},
    {"produced_answers", produced_answers, METH_VARARGS, "PRODUCE's answers, offsets counting up."},
    {"consumed_answers", consumed_answers, METH_VARARGS, "CONSUME's answers, from entries."},
    {"simple_positions", simple_positions, METH_VARARGS, "Where a chunk's simple entries start."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runs", NULL, -1, methods};

PyMODINIT_FUNC PyInit__runs(void) { return PyModule_Create(&module); }
