/* streamlet.sbp._flat: the results of SBP's APPEND and FETCH answers written in C, the one
 * per-record-batch loop of their hot path (flat.py lays out the rest of the buffer).
 *
 * fill_append(buf, at, status, runs): per run (request indexes, stream id, first offset, append
 * time ms), an AppendResult of 40 bytes per index from byte `at`, offsets counting up.
 * fill_fetch(buf, at, status, streams): per stream (request index, stream id, runs of offsets
 * [(first, count)], lengths as native int32), a FetchResult of 32 bytes per record, or one
 * empty result (length 0, offset -1) for a stream without records.
 * Every result's status field points to the shared Status table at `status`; the results'
 * vector (its elements from byte 60, as flat._frame lays it out) points to each.
 * read_columns(buf, vector_slot, fields): a vector of tables of scalar fields (APPEND's
 * AppendInfo, the answers' results), a list per field, every position checked as flat.py's
 * reader checks it (ValueError where it raises Malformed).
 * read_runs(buf, vector_slot): APPEND's AppendRuns (streamlet's), as flat.append_runs reads
 * them. append_run(frame): a whole APPEND frame of one AppendRun read at once (the usual one:
 * a client's batches to one stream), or None for the general path. flat.py has the same
 * functions in Python; both must give identical results
 * (tests/sbp/test_sbp_flat.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

static inline void le32(unsigned char *p, uint32_t v) {
    p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24;
}

static inline void le64(unsigned char *p, uint64_t v) {
    le32(p, (uint32_t)v);
    le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static PyObject *bad(const char *why, long long at) {
    PyErr_Format(PyExc_ValueError, "%s at %lld", why, at);
    return NULL;
}

/* The vtable of the table at `t`: its position, or -1 with an error set. */
static long long vtable(const unsigned char *p, long long len, long long t, long long *size) {
    if (t < 0 || t + 4 > len) {
        bad("a table outside the header", t);
        return -1;
    }
    long long vt = t - (int32_t)rd32(p + t);
    if (vt < 0 || vt + 4 > len) {
        bad("a vtable outside the header", vt);
        return -1;
    }
    *size = rd16(p + vt);
    if (*size < 4 || (*size & 1) || vt + *size > len) {
        bad("a bad vtable size", vt);
        return -1;
    }
    return vt;
}

static inline long long slot(const unsigned char *p, long long vt, long long size, int k) {
    long long at = 4 + 2 * k;
    return at + 2 <= size ? rd16(p + vt + at) : 0;
}

/* The vector a uoffset field at `at` points to: the position of its length (its elements of
 * 4 bytes follow), their count in `*n`; -1 with an error set when any of it is past the header. */
static long long vector_at(const unsigned char *p, long long len, long long at, long long *n) {
    if (at + 4 > len) {
        bad("a vector offset outside the header", at);
        return -1;
    }
    long long vec = at + rd32(p + at);
    if (vec + 4 > len) {
        bad("a vector outside the header", vec);
        return -1;
    }
    *n = rd32(p + vec);
    if (vec + 4 + 4 * *n > len) {
        bad("a vector longer than the header", vec);
        return -1;
    }
    return vec;
}

/* The offset of field `k` of the root table (0: absent), the root's position in `*root`; -1
 * with an error set for a header too short or a root table that cannot be read. */
static long long root_field(const unsigned char *p, long long len, int k, long long *root) {
    long long size;
    if (len < 8) {
        bad("a short extended header", len);
        return -1;
    }
    *root = rd32(p);
    long long vt = vtable(p, len, *root, &size);
    return vt < 0 ? -1 : slot(p, vt, size, k);
}

#define MAX_FIELDS 8

/* read_columns(buf, vector_slot, fields[, summary]): the tables of the vector in field
 * `vector_slot` of the root table, read as flat.Scalars reads them: `fields` is a tuple of
 * (slot, width 4 or 8, default); the result a list per field, the table's values in vector
 * order. With `summary`, no lists: (count, ((first, last, sum, consecutive), ...) per field),
 * `consecutive` true when each value is the one before plus 1 (a reader that only checks and
 * counts makes no object per table). */
static PyObject *read_columns(PyObject *self, PyObject *args) {
    Py_buffer view;
    int vslot, summary = 0;
    PyObject *spec;
    if (!PyArg_ParseTuple(args, "y*iO!|p", &view, &vslot, &PyTuple_Type, &spec, &summary))
        return NULL;
    long long first[MAX_FIELDS] = {0}, last[MAX_FIELDS] = {0}, sum[MAX_FIELDS] = {0};
    int consecutive[MAX_FIELDS];
    const unsigned char *p = view.buf;
    long long len = view.len;
    Py_ssize_t nf = PyTuple_GET_SIZE(spec);
    int slots[MAX_FIELDS], widths[MAX_FIELDS];
    long long defaults[MAX_FIELDS], offs[MAX_FIELDS];
    PyObject *cols[MAX_FIELDS] = {NULL}, *result = NULL;
    if (nf < 1 || nf > MAX_FIELDS || vslot < 0) {
        PyErr_SetString(PyExc_TypeError, "1 to 8 fields, a vector slot >= 0");
        goto done;
    }
    for (Py_ssize_t f = 0; f < nf; f++) {
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, f), "iiL", &slots[f], &widths[f],
                              &defaults[f]))
            goto done;
        if ((widths[f] != 4 && widths[f] != 8) || slots[f] < 0) {
            PyErr_SetString(PyExc_TypeError, "a field is (slot >= 0, width 4 or 8, default)");
            goto done;
        }
    }
    long long root, off = root_field(p, len, vslot, &root), n = 0, vec = 0;
    if (off < 0 || (off && (vec = vector_at(p, len, root + off, &n)) < 0))
        goto done;
    for (Py_ssize_t f = 0; f < nf; f++) {
        consecutive[f] = 1;
        if (!summary && !(cols[f] = PyList_New(n)))
            goto done;
    }
    long long last_vt = LLONG_MIN, end = 4; /* no layout yet */
    for (long long i = 0; i < n; i++) {
        long long e = vec + 4 + 4 * i, t = e + rd32(p + e);
        if (t + 4 > len) {
            bad("a table outside the header", t);
            goto done;
        }
        long long tvt = t - (int32_t)rd32(p + t);
        if (tvt != last_vt) { /* a new layout: checked as flat.Scalars._layout does */
            long long tsize;
            tvt = vtable(p, len, t, &tsize);
            if (tvt < 0)
                goto done;
            int order[MAX_FIELDS];
            for (Py_ssize_t f = 0; f < nf; f++) {
                offs[f] = slot(p, tvt, tsize, slots[f]);
                order[f] = (int)f;
            }
            for (Py_ssize_t x = 1; x < nf; x++) /* by offset: present fields must not overlap */
                for (Py_ssize_t y = x; y > 0 && offs[order[y]] < offs[order[y - 1]]; y--) {
                    int z = order[y]; order[y] = order[y - 1]; order[y - 1] = z;
                }
            end = 4; /* nor the soffset */
            for (Py_ssize_t x = 0; x < nf; x++) {
                long long o = offs[order[x]];
                if (!o)
                    continue;
                if (o < end) {
                    bad("overlapping fields in a table", t);
                    goto done;
                }
                end = o + widths[order[x]];
            }
            last_vt = tvt;
        }
        if (t + end > len) {
            bad("a table past the end of its header", t);
            goto done;
        }
        for (Py_ssize_t f = 0; f < nf; f++) {
            long long v = defaults[f];
            if (offs[f]) {
                const unsigned char *q = p + t + offs[f];
                v = widths[f] == 8 ? (long long)(int64_t)(rd32(q) | ((uint64_t)rd32(q + 4) << 32))
                                   : (long long)(int32_t)rd32(q);
            }
            if (summary) {
                if (i == 0)
                    first[f] = v;
                else if (v != last[f] + 1)
                    consecutive[f] = 0;
                last[f] = v;
                sum[f] = (long long)((unsigned long long)sum[f] + (unsigned long long)v);
                continue;
            }
            PyObject *o = PyLong_FromLongLong(v);
            if (!o)
                goto done;
            PyList_SET_ITEM(cols[f], i, o);
        }
    }
    if (summary) {
        PyObject *stats = PyTuple_New(nf);
        if (!stats)
            goto done;
        for (Py_ssize_t f = 0; f < nf; f++) {
            PyObject *one = Py_BuildValue("(LLLO)", first[f], last[f], sum[f],
                                          consecutive[f] ? Py_True : Py_False);
            if (!one) {
                Py_DECREF(stats);
                goto done;
            }
            PyTuple_SET_ITEM(stats, f, one);
        }
        result = Py_BuildValue("(LN)", n, stats);
        goto done;
    }
    if (!(result = PyTuple_New(nf)))
        goto done;
    for (Py_ssize_t f = 0; f < nf; f++) {
        PyTuple_SET_ITEM(result, f, cols[f]);
        cols[f] = NULL;
    }
done:
    for (int f = 0; f < MAX_FIELDS; f++)
        Py_XDECREF(cols[f]);
    PyBuffer_Release(&view);
    return result;
}

/* The vector's element for the result at `at` (the first at `first`, `size` bytes each). */
static inline void element(unsigned char *p, Py_ssize_t first, Py_ssize_t at, Py_ssize_t size) {
    Py_ssize_t e = 60 + 4 * ((at - first) / size);
    le32(p + e, (uint32_t)(at - e));
}

static int room(Py_buffer *view, Py_ssize_t at, Py_ssize_t size) {
    if (at < 64 || size > view->len - at) {
        PyErr_SetString(PyExc_ValueError, "the results do not fit the buffer");
        return 0;
    }
    return 1;
}

static PyObject *fill_append(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t at, status;
    PyObject *runs;
    if (!PyArg_ParseTuple(args, "w*nnO!", &view, &at, &status, &PyList_Type, &runs))
        return NULL;
    unsigned char *p = view.buf;
    PyObject *result = NULL;
    const Py_ssize_t base = at; /* the first result */
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(runs); r++) {
        PyObject *indexes;
        long long sid, offset, ms;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(runs, r), "O!LLL", &PyList_Type, &indexes, &sid,
                              &offset, &ms))
            goto done;
        Py_ssize_t n = PyList_GET_SIZE(indexes);
        if (!room(&view, at, 40 * n))
            goto done;
        for (Py_ssize_t i = 0; i < n; i++, at += 40, offset++) {
            long idx = PyLong_AsLong(PyList_GET_ITEM(indexes, i));
            if (idx == -1 && PyErr_Occurred())
                goto done;
            unsigned char *t = p + at;
            element(p, base, at, 40);
            le32(t, (uint32_t)(at - 16));               /* soffset: the vtable at 16 */
            le32(t + 4, (uint32_t)idx);
            le64(t + 8, (uint64_t)sid);
            le64(t + 16, (uint64_t)offset);
            le64(t + 24, (uint64_t)ms);
            le32(t + 32, (uint32_t)(status - at - 32)); /* uoffset from the field itself */
            le32(t + 36, 0);
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&view);
    return result;
}

/* A FetchResult of 32 bytes at `at`: soffset (the vtable at 16), request_index, stream_id,
 * batch_length, the status uoffset, base_offset; and its vector element. */
static void fetch_result(unsigned char *p, Py_ssize_t base, Py_ssize_t at, Py_ssize_t status,
                         long idx, long long sid, int32_t length, long long offset) {
    unsigned char *t = p + at;
    element(p, base, at, 32);
    le32(t, (uint32_t)(at - 16));
    le32(t + 4, (uint32_t)idx);
    le64(t + 8, (uint64_t)sid);
    le32(t + 16, (uint32_t)length);
    le32(t + 20, (uint32_t)(status - at - 20));
    le64(t + 24, (uint64_t)offset);
}

static PyObject *fill_fetch(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t at, status;
    PyObject *streams;
    if (!PyArg_ParseTuple(args, "w*nnO!", &view, &at, &status, &PyList_Type, &streams))
        return NULL;
    unsigned char *p = view.buf;
    PyObject *result = NULL;
    const Py_ssize_t base = at; /* the first result */
    for (Py_ssize_t s = 0; s < PyList_GET_SIZE(streams); s++) {
        long idx;
        long long sid;
        PyObject *runs;
        Py_buffer lengths;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(streams, s), "lLO!y*", &idx, &sid, &PyList_Type,
                              &runs, &lengths))
            goto done;
        const int32_t *len = lengths.buf;
        Py_ssize_t count = lengths.len / 4, k = 0;
        int ok = 1;
        if (count == 0) { /* no records: one empty result */
            if ((ok = room(&view, at, 32))) {
                fetch_result(p, base, at, status, idx, sid, 0, -1);
                at += 32;
            }
        } else if ((ok = room(&view, at, 32 * count))) {
            for (Py_ssize_t r = 0; ok && r < PyList_GET_SIZE(runs); r++) {
                long long first, n;
                if (!PyArg_ParseTuple(PyList_GET_ITEM(runs, r), "LL", &first, &n)) {
                    ok = 0;
                    break;
                }
                if (n < 0 || n > count - k) {
                    PyErr_SetString(PyExc_ValueError, "the runs hold more records than lengths");
                    ok = 0;
                    break;
                }
                for (long long i = 0; i < n; i++, k++, at += 32) {
                    fetch_result(p, base, at, status, idx, sid, len[k], first + i);
                }
            }
            if (ok && k != count) {
                PyErr_SetString(PyExc_ValueError, "the runs hold fewer records than lengths");
                ok = 0;
            }
        }
        PyBuffer_Release(&lengths);
        if (!ok)
            goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&view);
    return result;
}

/* A field of `width` bytes of the table at `t` (vtable `vt` of `size`): its position, 0 when
 * absent, -1 with an error set when it is past the header. */
static long long field_at(long long len, const unsigned char *p, long long t, long long vt,
                          long long size, int k, int width) {
    long long off = slot(p, vt, size, k);
    if (off && t + off + width > len) {
        bad("a field outside the header", t + off);
        return -1;
    }
    return off ? t + off : 0;
}

/* read_runs(buf, vector_slot): the AppendRuns (streamlet's) of the vector in field
 * `vector_slot` of the root table, as (stream_id, request_index, [batch_lengths], batch_count)
 * each; None when the root has no such field. Every position checked as flat.append_runs
 * checks it. */
static PyObject *read_runs(PyObject *self, PyObject *args) {
    Py_buffer view;
    int vslot;
    if (!PyArg_ParseTuple(args, "y*i", &view, &vslot))
        return NULL;
    const unsigned char *p = view.buf;
    long long len = view.len;
    PyObject *out = NULL, *result = NULL;
    if (len == 0) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    long long root, off = root_field(p, len, vslot, &root);
    if (off < 0)
        goto done;
    if (!off) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    long long n, vec = vector_at(p, len, root + off, &n);
    if (vec < 0 || !(out = PyList_New(n)))
        goto done;
    for (long long i = 0; i < n; i++) {
        long long e = vec + 4 + 4 * i, t = e + rd32(p + e), tsize;
        long long tvt = vtable(p, len, t, &tsize);
        if (tvt < 0)
            goto done;
        long long fs = field_at(len, p, t, tvt, tsize, 0, 8);
        long long fi = field_at(len, p, t, tvt, tsize, 1, 4);
        long long fl = field_at(len, p, t, tvt, tsize, 2, 4);
        long long fc = field_at(len, p, t, tvt, tsize, 3, 4);
        if (fs < 0 || fi < 0 || fl < 0 || fc < 0)
            goto done;
        long long sid = fs ? (long long)(int64_t)(rd32(p + fs) | ((uint64_t)rd32(p + fs + 4) << 32))
                           : 0;
        long long idx = fi ? (long long)(int32_t)rd32(p + fi) : 0;
        long long lv = 0, count = 0;
        if (fl && (lv = vector_at(p, len, fl, &count)) < 0)
            goto done;
        PyObject *lengths = PyList_New(count);
        if (!lengths)
            goto done;
        for (long long k = 0; k < count; k++) {
            PyObject *v = PyLong_FromLong((long)(int32_t)rd32(p + lv + 4 + 4 * k));
            if (!v) {
                Py_DECREF(lengths);
                goto done;
            }
            PyList_SET_ITEM(lengths, k, v);
        }
        long long batches = fc ? (long long)(int32_t)rd32(p + fc) : 0;
        PyObject *row = Py_BuildValue("(LLNL)", sid, idx, lengths, batches);
        if (!row)
            goto done;
        PyList_SET_ITEM(out, i, row);
    }
    result = out;
    out = NULL;
done:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return result;
}

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* append_run's checks: a request APPEND (magic, opcode, no response flag, its length and
 * FlatBuffers format) whose extended header holds no append_requests and exactly one AppendRun
 * of at least one batch, the lengths none negative and adding up to the payload: given in
 * batch_lengths, or (length_prefixed) behind each batch in the payload, batch_count of them
 * and no batch_lengths. Its fields in `out`: stream_id, request_index, batch count, the
 * lengths' position (-1: length-prefixed), the payload's. 0 when the frame is anything else
 * (the general path reads it, and answers what is wrong); never an error set. */
static int usual_append(const unsigned char *f, long long flen, long long out[5]) {
    if (flen < 16 || f[4] != 23 || f[5] != 0x10 || f[6] != 0x01 || (f[7] & 1) ||
        be32(f) != flen || f[12] != 0x01)
        return 0;
    long long hlen = ((long long)f[13] << 16) | (f[14] << 8) | f[15];
    if (16 + hlen > flen || hlen < 8)
        return 0;
    const unsigned char *p = f + 16;
    long long root, rsize, rvt, n, t, tsize, tvt;
    root = rd32(p);
    if ((rvt = vtable(p, hlen, root, &rsize)) < 0)
        goto other;
    long long infos = slot(p, rvt, rsize, 1), runs = slot(p, rvt, rsize, 2);
    long long fp = slot(p, rvt, rsize, 3);
    if (fp && root + fp + 1 > hlen)
        goto other;
    int prefixed = fp && p[root + fp];
    if (infos) {  /* the document's form beside runs: present but empty is still usual */
        if (vector_at(p, hlen, root + infos, &n) < 0 || n)
            goto other;
    }
    long long vec;
    if (!runs || (vec = vector_at(p, hlen, root + runs, &n)) < 0 || n != 1)
        goto other;
    t = vec + 4 + rd32(p + vec + 4);
    if ((tvt = vtable(p, hlen, t, &tsize)) < 0)
        goto other;
    long long fs = field_at(hlen, p, t, tvt, tsize, 0, 8);
    long long fi = field_at(hlen, p, t, tvt, tsize, 1, 4);
    long long fl = field_at(hlen, p, t, tvt, tsize, 2, 4);
    long long fc = field_at(hlen, p, t, tvt, tsize, 3, 4);
    long long lv = -1, count, total = 0, payload = flen - 16 - hlen;
    if (fs < 0 || fi < 0 || fc < 0)
        goto other;
    if (prefixed) {  /* walk the lengths in the payload: batch_count of them fill it */
        const unsigned char *b = f + 16 + hlen;
        if (fl || !fc || (count = (int32_t)rd32(p + fc)) <= 0)
            goto other;
        for (long long k = 0; k < count; k++) {
            if (payload - total < 4)
                goto other;
            uint32_t size = be32(b + total);
            if (size > INT32_MAX || (total += 4 + (long long)size) > payload)
                goto other;
        }
    } else {
        if (fc || fl <= 0 || (lv = vector_at(p, hlen, fl, &count)) < 0 || !count)
            goto other;
        for (long long k = 0; k < count; k++) {
            int32_t size = (int32_t)rd32(p + lv + 4 + 4 * k);
            if (size < 0 || (total += size) > payload)
                goto other;
        }
        lv += 16 + 4;
    }
    if (total != payload)
        goto other;
    out[0] = fs ? (long long)(int64_t)(rd32(p + fs) | ((uint64_t)rd32(p + fs + 4) << 32)) : 0;
    out[1] = fi ? (long long)(int32_t)rd32(p + fi) : 0;
    out[2] = count;
    out[3] = lv;
    out[4] = 16 + hlen;
    return 1;
other:
    PyErr_Clear();  /* the reading helpers set errors: here they only mean "not usual" */
    return 0;
}

/* append_run(frame): for the usual APPEND frame (usual_append), (frame stream identifier,
 * stream_id, request_index, count, lengths_at, payload_at), the positions in the frame of
 * its batch lengths (`count` little-endian int32; -1 when each is in the payload, before its
 * batch) and of its payload; None for any other. */
static PyObject *append_run(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    long long r[5];
    PyObject *result;
    if (usual_append(view.buf, view.len, r))
        result = Py_BuildValue("(kLLLLL)", (unsigned long)be32((unsigned char *)view.buf + 8),
                               r[0], r[1], r[2], r[3], r[4]);
    else {
        result = Py_None;
        Py_INCREF(result);
    }
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"fill_append", fill_append, METH_VARARGS, "Write an APPEND answer's results."},
    {"fill_fetch", fill_fetch, METH_VARARGS, "Write a FETCH answer's results."},
    {"read_columns", read_columns, METH_VARARGS, "Read a vector of scalar tables by column."},
    {"read_runs", read_runs, METH_VARARGS, "Read an APPEND request's AppendRuns."},
    {"append_run", append_run, METH_O, "The usual APPEND frame's run, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_flat", NULL, -1, methods};

PyMODINIT_FUNC PyInit__flat(void) { return PyModule_Create(&module); }
