/* SPDX-License-Identifier: MIT */
/* The array sinks' shared parts (common.h): dtype and shape keys, .npy headers, the
 * done record. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

static const struct {
	const char *name, *descr;
} dtype_names[] = {
	{"bool", "|b1"},      {"int8", "|i1"},        {"uint8", "|u1"},   {"int16", "<i2"},
	{"uint16", "<u2"},    {"int32", "<i4"},       {"uint32", "<u4"},  {"int64", "<i8"},
	{"uint64", "<u8"},    {"float16", "<f2"},     {"float32", "<f4"}, {"float64", "<f8"},
	{"complex64", "<c8"}, {"complex128", "<c16"}, {"half", "<f2"},    {"single", "<f4"},
	{"double", "<f8"},    {"byte", "|i1"},        {"ubyte", "|u1"},
};

int arr_parse_dtype(const char *who, const char *v, struct arr_dtype *out, struct gpud_error *err)
{
	const char *s = v;
	for (size_t i = 0; i < sizeof dtype_names / sizeof *dtype_names; i++)
		if (strcmp(v, dtype_names[i].name) == 0)
			s = dtype_names[i].descr;
	char order = '<';
	if (*s == '<' || *s == '>' || *s == '|' || *s == '=')
		order = *s++;
	if (order == '=')
		order = '<'; /* the machines gpud runs on are little-endian */
	char kind = *s ? *s++ : '\0';
	char *end;
	errno = 0;
	unsigned long size = isdigit((unsigned char)*s) ? strtoul(s, &end, 10) : 0;
	bool ok = size && *end == '\0' && errno == 0;
	switch (kind) {
	case 'b':
		ok = ok && size == 1;
		break;
	case 'i':
	case 'u':
		ok = ok && (size == 1 || size == 2 || size == 4 || size == 8);
		break;
	case 'f':
		ok = ok && (size == 2 || size == 4 || size == 8);
		break;
	case 'c':
		ok = ok && (size == 8 || size == 16);
		break;
	default:
		ok = false;
	}
	if (!ok)
		return gpud_fail(err,
				 "%s: dtype = '%s': not a NumPy dtype gpud writes (a name: bool, "
				 "int8 .. int64, uint8 .. uint64, float16, float32, float64, "
				 "complex64, complex128; or a type string: <f4, >i2, |u1, f8)",
				 who, v);
	if (size == 1)
		order = '|';
	else if (order == '|')
		return gpud_fail(err, "%s: dtype = '%s': '|' (no byte order) is for 1-byte types",
				 who, v);
	out->kind = kind;
	out->order = order;
	out->itemsize = size;
	snprintf(out->descr, sizeof out->descr, "%c%c%u", order, kind, (unsigned)(size & 31));
	return 0;
}

int arr_parse_shape(const char *who, const char *v, struct arr_shape *out, struct gpud_error *err)
{
	const char *p = v;
	out->ndim = 0;
	while (isspace((unsigned char)*p))
		p++;
	char close = *p == '(' ? ')' : *p == '[' ? ']' : '\0';
	if (close)
		p++;
	for (;;) {
		while (isspace((unsigned char)*p))
			p++;
		if (*p == close || (!close && !*p))
			break;
		if (!isdigit((unsigned char)*p))
			goto bad;
		char *end;
		errno = 0;
		unsigned long long d = strtoull(p, &end, 10);
		if (errno || d == 0 || d > (1ull << 40))
			return gpud_fail(err, "%s: shape = '%s': each size must be 1 to 2^40", who,
					 v);
		if (out->ndim == ARR_MAX_DIMS)
			return gpud_fail(err, "%s: shape = '%s': more than %d sizes", who, v,
					 ARR_MAX_DIMS);
		out->dims[out->ndim++] = d;
		p = end;
		while (isspace((unsigned char)*p))
			p++;
		if (*p == ',' || *p == 'x' || *p == 'X')
			p++;
		else if (*p != close && *p)
			goto bad;
	}
	if (close)
		p++;
	while (isspace((unsigned char)*p))
		p++;
	if (*p)
		goto bad;
	return 0;
bad:
	return gpud_fail(err,
			 "%s: shape = '%s': expected the sizes of one row, like 3, 3,4, (3, 4) "
			 "or 64x64x3 (empty: one scalar a row)",
			 who, v);
}

size_t arr_row_bytes(const struct arr_shape *s, const struct arr_dtype *d)
{
	size_t n = d->itemsize;
	for (unsigned i = 0; i < s->ndim; i++)
		if (__builtin_mul_overflow(n, (size_t)s->dims[i], &n))
			return 0;
	return n;
}

const char *arr_shape_str(const struct arr_shape *s, int64_t rows, char *buf, size_t len)
{
	size_t used = 0;
	unsigned n = 0;
#define PUT(...) used += (size_t)snprintf(buf + used, used < len ? len - used : 0, __VA_ARGS__)
	PUT("(");
	if (rows >= 0) {
		PUT("%lld", (long long)rows);
		n++;
	}
	for (unsigned i = 0; i < s->ndim; i++, n++)
		PUT("%s%llu", n ? ", " : "", (unsigned long long)s->dims[i]);
	PUT("%s)", n == 1 ? "," : "");
#undef PUT
	return buf;
}

int arr_pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
	const char *c = p;
	while (n) {
		ssize_t w = pwrite(fd, c, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		c += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

int arr_pread_all(int fd, void *p, size_t n, uint64_t off)
{
	char *c = p;
	while (n) {
		ssize_t r = pread(fd, c, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			errno = EIO;
			return -1;
		}
		c += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int arr_npy_write_header(int fd, const struct arr_dtype *dtype, const struct arr_shape *row,
			 uint64_t rows, uint64_t *data_off)
{
	char shape[512], dict[1024];
	arr_shape_str(row, (int64_t)rows, shape, sizeof shape);
	int dl = snprintf(dict, sizeof dict,
			  "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", dtype->descr,
			  shape);
	if (dl < 0 || (size_t)dl >= sizeof dict - 80) {
		errno = EOVERFLOW;
		return -1;
	}
	/* magic (6), version (2), length (2 in v1, 4 in v2); dict, spaces and a newline
	 * up to a multiple of 64 bytes. */
	size_t pre = 10, total = (pre + (size_t)dl + 1 + 63) / 64 * 64;
	unsigned char hdr[1200];
	memset(hdr, ' ', total);
	memcpy(hdr, "\x93NUMPY\x01\x00", 8);
	size_t hlen = total - pre;
	hdr[8] = (unsigned char)(hlen & 0xff);
	hdr[9] = (unsigned char)(hlen >> 8);
	memcpy(hdr + pre, dict, (size_t)dl);
	hdr[total - 1] = '\n';
	if (arr_pwrite_all(fd, hdr, total, 0) < 0)
		return -1;
	*data_off = total;
	return 0;
}

/* ---- .npy headers, read as NumPy reads them ----
 *
 * NumPy evaluates a header's text as a Python literal (ast.literal_eval) and then wants
 * a dict of exactly descr, fortran_order and shape: a key given twice is its last value,
 * fortran_order must be True or False, shape a tuple of ints. The parser below reads the
 * literals a header can hold (strings, True/False/None, integers, tuples and lists of
 * them, nested) and refuses the rest, naming what it found. */

struct lit {
	char kind;     /* 's' string, 'b' bool, 'n' None, 'i' int, 't' tuple, 'l' list */
	bool truth;    /* 'b' */
	bool long_str; /* 's' longer than str holds */
	bool neg;      /* 'i': below zero */
	bool all_int;  /* 't', 'l': every item an int */
	bool too_many; /* 't', 'l': more items than items holds */
	char str[64];  /* 's' */
	uint64_t ival; /* 'i': its magnitude */
	unsigned n;    /* 't', 'l': items */
	uint64_t items[ARR_MAX_DIMS + 1];
	bool items_neg; /* 't', 'l': an int item below zero */
};

struct lexer {
	const char *p, *end;
	const char *what; /* why it stopped, for the message */
};

static void lex_ws(struct lexer *lx)
{
	while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' ||
				   *lx->p == '\r' || *lx->p == '\f' || *lx->p == '\v'))
		lx->p++;
}

static int lex_fail(struct lexer *lx, const char *what)
{
	lx->what = what;
	return -1;
}

static int lit_parse(struct lexer *lx, struct lit *v, int depth);

static int lit_string(struct lexer *lx, struct lit *v)
{
	char q = *lx->p++;
	size_t n = 0;
	v->kind = 's';
	for (;;) {
		if (lx->p >= lx->end || *lx->p == '\n')
			return lex_fail(lx, "a string without its closing quote");
		char c = *lx->p++;
		if (c == q)
			break;
		if (c == '\\')
			return lex_fail(lx, "an escape in a string (not in a header NumPy writes)");
		if (n + 1 < sizeof v->str)
			v->str[n++] = c;
		else
			v->long_str = true;
	}
	v->str[n] = '\0';
	return 0;
}

static int lit_number(struct lexer *lx, struct lit *v)
{
	v->kind = 'i';
	if (*lx->p == '-' || *lx->p == '+')
		v->neg = *lx->p++ == '-';
	if (lx->p >= lx->end || *lx->p < '0' || *lx->p > '9')
		return lex_fail(lx, "a sign without a number");
	uint64_t x = 0;
	while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
		if (x > (UINT64_MAX - 9) / 10)
			return lex_fail(lx, "an integer too large");
		x = x * 10 + (uint64_t)(*lx->p++ - '0');
	}
	if (lx->p < lx->end && (isalnum((unsigned char)*lx->p) || *lx->p == '.' || *lx->p == '_'))
		return lex_fail(lx, "a number that is not a plain integer");
	v->ival = x;
	v->neg = v->neg && x;
	return 0;
}

/* ( ... ) or [ ... ]: a tuple or list; "(x)" without a comma is x itself, as Python
 * reads it. */
static int lit_sequence(struct lexer *lx, struct lit *v, int depth)
{
	char close = *lx->p++ == '(' ? ')' : ']';
	struct lit item;
	bool comma = false;
	v->kind = close == ')' ? 't' : 'l';
	v->all_int = true;
	for (;;) {
		lex_ws(lx);
		if (lx->p < lx->end && *lx->p == close) {
			lx->p++;
			break;
		}
		memset(&item, 0, sizeof item);
		if (lit_parse(lx, &item, depth + 1) < 0)
			return -1;
		if (close == ')' && v->n == 0) { /* kept, in case it is "(x)" */
			lex_ws(lx);
			if (lx->p < lx->end && *lx->p == ')') {
				lx->p++;
				*v = item;
				return 0;
			}
		}
		if (item.kind != 'i')
			v->all_int = false;
		else if (v->n < ARR_MAX_DIMS + 1)
			v->items[v->n] = item.ival;
		if (item.kind == 'i' && item.neg)
			v->items_neg = true;
		if (v->n == ARR_MAX_DIMS + 1)
			v->too_many = true;
		else
			v->n++;
		lex_ws(lx);
		comma = lx->p < lx->end && *lx->p == ',';
		if (comma)
			lx->p++;
		else if (lx->p >= lx->end || *lx->p != close)
			return lex_fail(lx, close == ')' ? "a tuple without its ')'"
							 : "a list without its ']'");
	}
	(void)comma;
	return 0;
}

static int lit_parse(struct lexer *lx, struct lit *v, int depth)
{
	lex_ws(lx);
	if (depth > 8)
		return lex_fail(lx, "values nested too deep");
	if (lx->p >= lx->end)
		return lex_fail(lx, "a value missing");
	char c = *lx->p;
	if (c == '\'' || c == '"')
		return lit_string(lx, v);
	if (c == '(' || c == '[')
		return lit_sequence(lx, v, depth);
	if (c == '-' || c == '+' || (c >= '0' && c <= '9'))
		return lit_number(lx, v);
	static const struct {
		const char *word;
		char kind;
		bool truth;
	} words[] = {{"True", 'b', true}, {"False", 'b', false}, {"None", 'n', false}};
	for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
		size_t n = strlen(words[i].word);
		if ((size_t)(lx->end - lx->p) >= n && memcmp(lx->p, words[i].word, n) == 0 &&
		    ((size_t)(lx->end - lx->p) == n ||
		     !(isalnum((unsigned char)lx->p[n]) || lx->p[n] == '_'))) {
			lx->p += n;
			v->kind = words[i].kind;
			v->truth = words[i].truth;
			return 0;
		}
	}
	return lex_fail(lx, "a value that is not a string, number, True, False, None, tuple "
			    "or list");
}

/* What a lit is, for a message: "1", "'x'", "a list". */
static const char *lit_str(const struct lit *v, char *buf, size_t len)
{
	switch (v->kind) {
	case 'i':
		snprintf(buf, len, "%s%llu", v->neg ? "-" : "", (unsigned long long)v->ival);
		break;
	case 's':
		snprintf(buf, len, "'%s%s'", v->str, v->long_str ? "..." : "");
		break;
	case 'n':
		snprintf(buf, len, "None");
		break;
	case 'b':
		snprintf(buf, len, "%s", v->truth ? "True" : "False");
		break;
	default:
		snprintf(buf, len, "a %s", v->kind == 't' ? "tuple" : "list");
	}
	return buf;
}

/* The dict of a header's text: descr, fortran_order and shape, each its last value. */
static int parse_dict(const char *dict, size_t len, const char *path, struct arr_npy_head *h,
		      struct gpud_error *err)
{
	struct lexer lx = {dict, dict + len, NULL};
	struct lit key, val, descr = {0}, fortran = {0}, shape = {0};
	char a[96];
	lex_ws(&lx);
	if (lx.p >= lx.end || *lx.p != '{')
		return gpud_fail(err, "%s: its .npy header is not a dict (NumPy refuses it too)",
				 path);
	lx.p++;
	for (;;) {
		lex_ws(&lx);
		if (lx.p < lx.end && *lx.p == '}') {
			lx.p++;
			break;
		}
		memset(&key, 0, sizeof key);
		memset(&val, 0, sizeof val);
		if (lit_parse(&lx, &key, 1) < 0)
			goto syntax;
		lex_ws(&lx);
		if (lx.p >= lx.end || *lx.p != ':') {
			lx.what = "a key without ':'";
			goto syntax;
		}
		lx.p++;
		if (lit_parse(&lx, &val, 1) < 0)
			goto syntax;
		/* A key given again replaces its value, as in a Python dict. */
		if (key.kind == 's' && strcmp(key.str, "descr") == 0)
			descr = val;
		else if (key.kind == 's' && strcmp(key.str, "fortran_order") == 0)
			fortran = val;
		else if (key.kind == 's' && strcmp(key.str, "shape") == 0)
			shape = val;
		else
			return gpud_fail(err,
					 "%s: its .npy header has the key %s: NumPy reads only "
					 "descr, fortran_order and shape (and refuses it too)",
					 path, lit_str(&key, a, sizeof a));
		lex_ws(&lx);
		if (lx.p < lx.end && *lx.p == ',')
			lx.p++;
		else if (lx.p >= lx.end || *lx.p != '}') {
			lx.what = "a dict without its '}'";
			goto syntax;
		}
	}
	lex_ws(&lx);
	if (lx.p < lx.end && *lx.p != '\0') {
		lx.what = "text after the dict";
		goto syntax;
	}
	if (!descr.kind || !fortran.kind || !shape.kind)
		return gpud_fail(err, "%s: its .npy header lacks %s (NumPy refuses it too)", path,
				 !descr.kind     ? "descr"
				 : !fortran.kind ? "fortran_order"
						 : "shape");
	if (fortran.kind != 'b')
		return gpud_fail(err,
				 "%s: its .npy header's fortran_order is %s, not True or False "
				 "(NumPy refuses it too)",
				 path, lit_str(&fortran, a, sizeof a));
	if (shape.kind != 't' || !shape.all_int)
		return gpud_fail(err,
				 "%s: its .npy header's shape is %s, not a tuple of integers "
				 "(NumPy refuses it too)",
				 path, lit_str(&shape, a, sizeof a));
	if (shape.items_neg)
		return gpud_fail(err, "%s: its .npy header's shape has a negative size", path);
	if (shape.too_many)
		return gpud_fail(err, "%s: its .npy header's shape has more than %d sizes", path,
				 ARR_MAX_DIMS + 1);
	if (descr.kind == 'l') {
		h->record = true;
	} else if (descr.kind != 's' || descr.long_str || !descr.str[0]) {
		return gpud_fail(err, "%s: its .npy header's descr is %s, not a dtype gpud reads",
				 path, lit_str(&descr, a, sizeof a));
	}
	snprintf(h->descr, sizeof h->descr, "%s", descr.kind == 's' ? descr.str : "");
	h->fortran = fortran.truth;
	h->ndim = shape.n;
	memcpy(h->dims, shape.items, shape.n * sizeof *h->dims);
	return 0;
syntax:
	return gpud_fail(err, "%s: its .npy header is not one NumPy reads: %s at byte %zu of it",
			 path, lx.what ? lx.what : "a syntax error", (size_t)(lx.p - dict));
}

int arr_npy_parse(int fd, const char *path, struct arr_npy_head *h, struct gpud_error *err)
{
	unsigned char pre[12];
	memset(h, 0, sizeof *h);
	if (arr_pread_all(fd, pre, sizeof pre, 0) < 0 || memcmp(pre, "\x93NUMPY", 6) != 0)
		return gpud_fail(err, "%s is not a .npy file (no \\x93NUMPY magic)", path);
	uint64_t hlen, start;
	if (pre[6] == 1) {
		hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
		start = 10;
	} else if (pre[6] == 2 || pre[6] == 3) {
		hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 |
		       (uint64_t)pre[11] << 24;
		start = 12;
	} else {
		return gpud_fail(err, "%s: .npy format version %u.%u is not one gpud reads", path,
				 pre[6], pre[7]);
	}
	if (hlen > (1u << 20))
		return gpud_fail(err, "%s: .npy header of %llu bytes is too long", path,
				 (unsigned long long)hlen);
	char *dict = malloc(hlen + 1);
	if (!dict)
		return gpud_fail(err, "out of memory reading %s", path);
	if (arr_pread_all(fd, dict, hlen, start) < 0) {
		free(dict);
		return gpud_fail(err, "%s: its .npy header is cut short", path);
	}
	dict[hlen] = '\0';
	int rc = parse_dict(dict, hlen, path, h, err);
	free(dict);
	h->data_off = start + hlen;
	return rc;
}

int arr_npy_read_header(int fd, const char *path, struct arr_npy *out, struct gpud_error *err)
{
	struct arr_npy_head h;
	memset(out, 0, sizeof *out);
	if (arr_npy_parse(fd, path, &h, err) < 0)
		return -1;
	if (h.record)
		return gpud_fail(err, "%s has a record dtype (named fields)", path);
	if (arr_parse_dtype(path, h.descr, &out->dtype, err) < 0)
		return -1;
	if (h.ndim == 0)
		return gpud_fail(err, "%s holds a scalar, not rows", path);
	if (h.ndim - 1 > ARR_MAX_DIMS)
		return gpud_fail(err, "%s: its .npy header's shape has more than %d sizes", path,
				 ARR_MAX_DIMS + 1);
	out->fortran = h.fortran;
	out->rows = h.dims[0];
	out->row.ndim = h.ndim - 1;
	memcpy(out->row.dims, h.dims + 1, out->row.ndim * sizeof *h.dims);
	out->data_off = h.data_off;
	return 0;
}

char *arr_done_path(const char *path)
{
	char *p;
	return asprintf(&p, "%s.done", path) < 0 ? NULL : p;
}

int arr_done_open(const char *path, uint64_t rows, bool keep, uint64_t *data_off,
		  struct gpud_error *err)
{
	static const struct arr_dtype u8 = {"|u1", 'u', '|', 1};
	const struct arr_shape none = {0};
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | (keep ? 0 : O_TRUNC), 0666);
	if (fd < 0)
		return gpud_fail(err, "cannot open %s: %s", path, strerror(errno));
	struct stat st;
	if (keep && fstat(fd, &st) == 0 && st.st_size > 0) {
		struct arr_npy h;
		if (arr_npy_read_header(fd, path, &h, err) < 0)
			goto fail;
		if (h.rows != rows || h.row.ndim != 0 || h.dtype.itemsize != 1)
			return close(fd),
			       gpud_fail(err,
					 "%s records %llu rows, the array has %llu: it belongs to "
					 "another output (remove both to start afresh)",
					 path, (unsigned long long)h.rows,
					 (unsigned long long)rows);
		if (fstat(fd, &st) == 0 && (uint64_t)st.st_size < h.data_off + rows &&
		    ftruncate(fd, (off_t)(h.data_off + rows)) < 0) {
			gpud_fail(err, "cannot size %s: %s", path, strerror(errno));
			goto fail;
		}
		*data_off = h.data_off;
		return fd;
	}
	if (arr_npy_write_header(fd, &u8, &none, rows, data_off) < 0 ||
	    ftruncate(fd, (off_t)(*data_off + rows)) < 0) {
		gpud_fail(err, "cannot write %s: %s", path, strerror(errno));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

uint8_t *arr_done_read(int fd, const char *path, uint64_t rows, uint64_t data_off,
		       struct gpud_error *err)
{
	uint8_t *b = malloc(rows ? rows : 1);
	if (!b) {
		gpud_fail(err, "out of memory reading %s", path);
		return NULL;
	}
	if (arr_pread_all(fd, b, rows, data_off) < 0) {
		gpud_fail(err, "cannot read %s: %s", path, strerror(errno));
		free(b);
		return NULL;
	}
	return b;
}

int arr_done_write_job(int fd, uint64_t data_off, uint64_t rows, uint64_t job_id)
{
	char line[ARR_JOB_LINE + 1];
	snprintf(line, sizeof line, "\ngpud job_id %016llx\n", (unsigned long long)job_id);
	if (arr_pwrite_all(fd, line, ARR_JOB_LINE, data_off + rows) < 0 ||
	    ftruncate(fd, (off_t)(data_off + rows + ARR_JOB_LINE)) < 0)
		return -1;
	return 0;
}

int arr_done_read_job(int fd, uint64_t data_off, uint64_t rows, uint64_t *job_id)
{
	char line[ARR_JOB_LINE + 1];
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -1;
	if ((uint64_t)st.st_size < data_off + rows + ARR_JOB_LINE)
		return 0;
	if (arr_pread_all(fd, line, ARR_JOB_LINE, data_off + rows) < 0)
		return -1;
	line[ARR_JOB_LINE] = '\0';
	unsigned long long v;
	char end;
	if (memcmp(line, "\ngpud job_id ", 13) != 0 ||
	    sscanf(line + 13, "%16llx%c", &v, &end) != 2 || end != '\n')
		return 0;
	*job_id = v;
	return 1;
}
