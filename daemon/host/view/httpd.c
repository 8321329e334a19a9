/* SPDX-License-Identifier: MIT */
/* The metrics endpoint's HTTP/1.0 responder (httpd.h). */
#define _GNU_SOURCE
#include "view/httpd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct conn {
	int fd;
	uint64_t deadline;
	char *in; /* HTTPD_REQ_MAX + 1 bytes */
	size_t in_len;
	char *out; /* the whole answer, once the request is in */
	size_t out_len, out_off;
	bool lingering; /* answered: what the client still sends is read and dropped until
			 * it closes (closing on unread data would reset the connection, and
			 * the answer with it) */
};

struct httpd {
	int listen_fd;
	httpd_render_fn render;
	void *ctx;
	struct conn c[HTTPD_MAX_CONN];
	unsigned n;
};

struct httpd *httpd_new(int listen_fd, httpd_render_fn render, void *ctx)
{
	struct httpd *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	int fl = fcntl(listen_fd, F_GETFL);
	if (fl >= 0)
		fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK);
	d->listen_fd = listen_fd;
	d->render = render;
	d->ctx = ctx;
	return d;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->in);
	free(c->out);
	*c = (struct conn){.fd = -1};
}

void httpd_free(struct httpd *d)
{
	if (!d)
		return;
	for (unsigned i = 0; i < d->n; i++)
		conn_close(&d->c[i]);
	free(d);
}

unsigned httpd_pollfds(struct httpd *d, struct pollfd *pf)
{
	pf[0] = (struct pollfd){d->listen_fd, POLLIN, 0};
	for (unsigned i = 0; i < d->n; i++)
		pf[1 + i] = (struct pollfd){
			d->c[i].fd, d->c[i].out && !d->c[i].lingering ? POLLOUT : POLLIN, 0};
	return 1 + d->n;
}

int httpd_timeout_ms(const struct httpd *d, uint64_t now)
{
	uint64_t first = UINT64_MAX;
	for (unsigned i = 0; i < d->n; i++)
		if (d->c[i].deadline < first)
			first = d->c[i].deadline;
	if (first == UINT64_MAX)
		return -1;
	return first <= now ? 0 : (int)((first - now) / 1000000u) + 1;
}

/* The answer to the request in c->in (whole or cut at HTTPD_REQ_MAX). */
static void answer(struct httpd *d, struct conn *c, bool too_big)
{
	const char *req = c->in, *status = "200 OK";
	char *body = NULL;
	size_t len = 0;
	bool head_only = strncmp(req, "HEAD ", 5) == 0;
	if (too_big) {
		status = "431 Request Header Fields Too Large";
	} else if (strncmp(req, "GET ", 4) != 0 && !head_only) {
		status = "405 Method Not Allowed";
	} else {
		const char *path = req + (head_only ? 5 : 4);
		size_t pl = strcspn(path, " ?\r\n");
		if (!(pl == 8 && strncmp(path, "/metrics", 8) == 0) && !(pl == 1 && path[0] == '/'))
			status = "404 Not Found";
		else
			body = d->render(d->ctx, &len);
		if (!body && strcmp(status, "200 OK") == 0)
			status = "500 Internal Server Error";
	}
	if (!body) {
		const char *text = too_big ? "request too large\n" : "see /metrics\n";
		body = strdup(text);
		len = body ? strlen(text) : 0;
	}
	char head[256];
	int hl =
		snprintf(head, sizeof head,
			 "HTTP/1.0 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			 status, len);
	size_t send_body = head_only ? 0 : len;
	c->out = malloc((size_t)hl + send_body);
	if (c->out) {
		memcpy(c->out, head, (size_t)hl);
		if (send_body)
			memcpy(c->out + hl, body, send_body);
		c->out_len = (size_t)hl + send_body;
		c->out_off = 0;
	}
	free(body);
}

/* Reads what there is; false when the connection is done with. */
static bool on_read(struct httpd *d, struct conn *c)
{
	for (;;) {
		ssize_t n = read(c->fd, c->in + c->in_len, HTTPD_REQ_MAX - c->in_len);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR;
		if (n == 0)
			return false; /* gone before a whole request */
		c->in_len += (size_t)n;
		c->in[c->in_len] = '\0';
		if (strstr(c->in, "\r\n\r\n") || strstr(c->in, "\n\n")) {
			answer(d, c, false);
			return c->out != NULL;
		}
		if (c->in_len == HTTPD_REQ_MAX) {
			answer(d, c, true);
			return c->out != NULL;
		}
	}
}

/* Writes what the socket takes; false when the connection is done with. Once all is
 * sent it lingers: the write side is shut, and what the client still sends is dropped
 * until it closes or its deadline comes. */
static bool on_write(struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR;
		c->out_off += (size_t)n;
	}
	shutdown(c->fd, SHUT_WR);
	c->lingering = true;
	return true;
}

/* Drops what a client sends after its answer; false once it has closed. */
static bool on_linger(struct conn *c)
{
	char sink[4096];
	for (;;) {
		ssize_t n = read(c->fd, sink, sizeof sink);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR;
		if (n == 0)
			return false;
	}
}

static void accept_all(struct httpd *d, uint64_t now)
{
	/* A bounded number per round, so a flood cannot keep the thread here. */
	for (unsigned k = 0; k < 2 * HTTPD_MAX_CONN; k++) {
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		if (d->n == HTTPD_MAX_CONN) {
			/* Full: the oldest goes (the one whose deadline comes first). */
			unsigned old = 0;
			for (unsigned i = 1; i < d->n; i++)
				if (d->c[i].deadline < d->c[old].deadline)
					old = i;
			conn_close(&d->c[old]);
			d->c[old] = d->c[--d->n];
		}
		struct conn *c = &d->c[d->n];
		*c = (struct conn){.fd = fd, .deadline = now + HTTPD_DEADLINE_NS};
		c->in = malloc(HTTPD_REQ_MAX + 1);
		if (!c->in) {
			close(fd);
			continue;
		}
		c->in[0] = '\0';
		d->n++;
	}
}

void httpd_handle(struct httpd *d, const struct pollfd *pf, unsigned n, uint64_t now)
{
	/* The connections polled first (their places in pf are those of d->c), then new
	 * ones, then the deadlines. */
	for (unsigned k = 1; k < n && k - 1 < d->n; k++) {
		struct conn *c = &d->c[k - 1];
		if (!pf[k].revents || pf[k].fd != c->fd)
			continue;
		bool keep;
		if (c->lingering)
			keep = on_linger(c);
		else if (c->out)
			keep = on_write(c);
		else if (pf[k].revents & (POLLIN | POLLHUP | POLLERR))
			keep = on_read(d, c) && (!c->out || on_write(c));
		else
			keep = true;
		if (!keep)
			conn_close(c);
	}
	for (unsigned i = 0; i < d->n;) {
		if (d->c[i].fd < 0 || d->c[i].deadline <= now) {
			conn_close(&d->c[i]);
			d->c[i] = d->c[--d->n];
		} else {
			i++;
		}
	}
	if (pf[0].revents & POLLIN)
		accept_all(d, now);
}
