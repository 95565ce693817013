/* streamlet.rabbitmq._speedups: the Publish v1 split, the one per-message loop of the broker.
 *
 * split_publish_v1(body) walks a Publish v1 body (PublisherId u8, Count i32, then per message
 * PublishingId u64 + entry) once and returns
 *   (publisher_id, count, ids, data, records, first_id, last_id, increasing)
 * where `ids` is the publishing ids packed big-endian (a PublishConfirm body as is) and `data`
 * the entries joined (a chunk's data as is). publish.py has the same function in Python; both
 * must give identical results (tests/rabbitmq/test_publish_split.py checks that).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p) {
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

static PyObject *malformed(const char *why, Py_ssize_t pos) {
    PyErr_Format(PyExc_ValueError, "%s at byte %zd", why, pos);
    return NULL;
}

static PyObject *split_publish_v1(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t end = view.len, pos = 5;
    PyObject *ids = NULL, *data = NULL, *result = NULL;
    if (end < 5) {
        malformed("truncated publish", end);
        goto done;
    }
    int publisher_id = p[0];
    int32_t count = (int32_t)be32(p + 1);
    if (count < 0 || (Py_ssize_t)count * 12 > end - 5) {
        PyErr_Format(PyExc_ValueError, "bad message count %d", count);
        goto done;
    }
    Py_ssize_t data_len = end - 5 - (Py_ssize_t)count * 8; /* exact when well formed */
    ids = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    data = PyBytes_FromStringAndSize(NULL, data_len);
    if (ids == NULL || data == NULL)
        goto done;
    unsigned char *out_ids = (unsigned char *)PyBytes_AS_STRING(ids);
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    const unsigned char *out_end = out + data_len;
    uint64_t first = 0, last = 0, prev = 0;
    int increasing = 1, batched = 0;
    long long records = 0;
    for (int32_t i = 0; i < count; i++) {
        if (end - pos < 9) {
            malformed("truncated message", pos);
            goto done;
        }
        uint64_t id = be64(p + pos);
        memcpy(out_ids + (Py_ssize_t)i * 8, p + pos, 8);
        pos += 8;
        if (i == 0)
            first = id;
        else if (id <= prev)
            increasing = 0;
        prev = id;
        Py_ssize_t size;
        if ((p[pos] & 0x80) == 0) {
            if (end - pos < 4) {
                malformed("truncated entry", pos);
                goto done;
            }
            size = 4 + (Py_ssize_t)be32(p + pos);
            records += 1;
        } else {
            if (end - pos < 11) {
                malformed("truncated sub-entry batch", pos);
                goto done;
            }
            records += ((unsigned)p[pos + 1] << 8) | p[pos + 2];
            size = 11 + (Py_ssize_t)be32(p + pos + 7);
            batched = 1;
        }
        /* a wrong Count can make entries run past the room left for the later messages */
        if (size > end - pos || size > out_end - out) {
            malformed("truncated entry", pos);
            goto done;
        }
        memcpy(out, p + pos, size);
        out += size;
        pos += size;
    }
    last = prev;
    if (pos != end) {
        PyErr_Format(PyExc_ValueError, "%zd unexpected bytes after publish", end - pos);
        goto done;
    }
    /* PublishBatch's fields in order, filter_values None (v1), simple: no sub-entry batch */
    result = Py_BuildValue("(iiOOLKKOOO)", publisher_id, (int)count, ids, data, records,
                           (unsigned long long)first, (unsigned long long)last,
                           increasing ? Py_True : Py_False, Py_None,
                           batched ? Py_False : Py_True);
done:
    Py_XDECREF(ids);
    Py_XDECREF(data);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"split_publish_v1", split_publish_v1, METH_O, "Split a Publish v1 body into ids and data."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
