/* streamlet.wire._arena: arena(n), a bytearray of n bytes left as malloc gave them, for
 * framing.ReadBuffer: reads fill it before any byte of it is read, so zeroing it
 * (bytearray(n), the Python twin) is work for nothing. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *arena(PyObject *self, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

static PyMethodDef methods[] = {
    {"arena", arena, METH_O, "A bytearray of n bytes, not zeroed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_arena", NULL, -1, methods};

PyMODINIT_FUNC PyInit__arena(void) { return PyModule_Create(&module); }
