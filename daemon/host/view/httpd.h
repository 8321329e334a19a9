/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint's HTTP/1.0 responder: many clients at once, none of which can
 * hold it. Every connection is non-blocking and polled with the others, so a client
 * that sends nothing, or a byte now and then, delays nobody; each has HTTPD_DEADLINE_NS
 * from its accept for its whole request and answer, however it trickles; a request over
 * HTTPD_REQ_MAX bytes is answered 431 and closed; at most HTTPD_MAX_CONN connections
 * are kept, and a new one replaces the oldest (so a scraper always gets in), and the
 * memory is bounded by those two numbers and the answers.
 *
 * It runs in the metrics thread alone: no locking.
 */
#ifndef GPUD_HTTPD_H
#define GPUD_HTTPD_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#define HTTPD_MAX_CONN 64
#define HTTPD_REQ_MAX 8192
#define HTTPD_DEADLINE_NS 2000000000u

/* Renders the body of a GET /metrics (malloc'd, *len set), or NULL. */
typedef char *(*httpd_render_fn)(void *ctx, size_t *len);

struct httpd;

/* Takes `listen_fd` (made non-blocking here; still the caller's to close). NULL when
 * out of memory. */
struct httpd *httpd_new(int listen_fd, httpd_render_fn render, void *ctx);
void httpd_free(struct httpd *d);

/* Fills `pf` with what to poll (the listening socket, then each connection): at most
 * 1 + HTTPD_MAX_CONN entries; returns how many. */
unsigned httpd_pollfds(struct httpd *d, struct pollfd *pf);
/* The poll timeout for the nearest connection deadline, in ms (-1: none). */
int httpd_timeout_ms(const struct httpd *d, uint64_t now);
/* Handles what poll() returned in `pf` (as filled by httpd_pollfds), and closes the
 * connections past their deadline. */
void httpd_handle(struct httpd *d, const struct pollfd *pf, unsigned n, uint64_t now);

#endif /* GPUD_HTTPD_H */
