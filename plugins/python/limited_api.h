/* SPDX-License-Identifier: MIT */
/* CPython's stable ABI of 3.9, as the python glue (common.h) and the `gpud` package's
 * extension (python/gpud/_gpud.c) both build on it: one build runs on CPython 3.9 to
 * 3.13. Included first, in place of <Python.h>. */
#ifndef GPUD_PY_LIMITED_API_H
#define GPUD_PY_LIMITED_API_H

#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/*
 * What the 3.9 limited API leaves out and the glue needs: the buffer protocol (in the
 * limited API from 3.11) and a str's UTF-8 without a copy (from 3.10). libpython 3.9
 * and 3.10 export these functions all the same, with these signatures, and Py_buffer's
 * layout is the one 3.11 made stable; the type slots' numbers are the stable ABI's.
 */
#if Py_LIMITED_API + 0 < 0x030b0000
typedef struct {
	void *buf;
	PyObject *obj;
	Py_ssize_t len;
	Py_ssize_t itemsize;
	int readonly;
	int ndim;
	char *format;
	Py_ssize_t *shape;
	Py_ssize_t *strides;
	Py_ssize_t *suboffsets;
	void *internal;
} Py_buffer;
PyAPI_FUNC(int) PyObject_CheckBuffer(PyObject *obj);
PyAPI_FUNC(int) PyObject_GetBuffer(PyObject *obj, Py_buffer *view, int flags);
PyAPI_FUNC(void) PyBuffer_Release(Py_buffer *view);
PyAPI_FUNC(int) PyBuffer_FillInfo(Py_buffer *view, PyObject *o, void *buf, Py_ssize_t len,
				  int readonly, int flags);
#define PyBUF_SIMPLE 0
#define PyBUF_ND 0x0008
#define PyBUF_STRIDES (0x0010 | PyBUF_ND)
#define PyBUF_C_CONTIGUOUS (0x0020 | PyBUF_STRIDES)
#ifndef Py_bf_getbuffer
#define Py_bf_getbuffer 1
#define Py_bf_releasebuffer 2
#endif
#endif
#ifndef PyBUF_READ /* PyMemoryView_FromMemory's flag: stable since 3.3, its name from 3.11 */
#define PyBUF_READ 0x100
#endif
#if Py_LIMITED_API + 0 < 0x030a0000
PyAPI_FUNC(const char *) PyUnicode_AsUTF8AndSize(PyObject *unicode, Py_ssize_t *size);
#endif

#endif
