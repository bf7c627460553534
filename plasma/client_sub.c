/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plasma subscriptions (include/ferry/plasma.h): a connection of their own to the store that
 * sends one PlasmaSubscribe and then only receives PlasmaNotify batches (the server side is
 * plasma/server_events.c). The caller polls the socket; read() hands out the events of the
 * batch in hand, then parses the next one.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/client_int.h"

static const char comp[] = "plasma";

struct ferry_plasma_subscription {
	int fd;				   /* our own connection to the store */
	struct ferry__frame_parser parser; /* frames in */
	struct ferry_plasma_event *held;   /* the last batch's events not handed out yet */
	size_t held_cap;		   /* room in held */
	size_t held_count;		   /* events in held */
	size_t held_next;		   /* the next one to hand out */
	uint64_t missed;		   /* lost events not reported yet */
	uint64_t seq;			   /* seq of the last batch */
	int error;			   /* sticky: the connection is unusable (-errno) */
};

/* Wait up to @timeout_ms (< 0: forever) for bytes and read them into the parser. Returns 1
 * (read some), 0 (timed out), -ECONNRESET at EOF, or -errno. */
static int read_some(struct ferry_plasma_subscription *s, int64_t timeout_ms)
{
	struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
	uint8_t *space;
	size_t size;
	ssize_t n;
	int r;

	do {
		r = poll(&pfd, 1, timeout_ms < 0 ? -1 : (int)FERRY_MIN(timeout_ms, INT32_MAX));
	} while (r < 0 && errno == EINTR);
	if (r <= 0)
		return r < 0 ? -errno : 0;
	r = ferry__frame_parser_space(&s->parser, &space, &size);
	if (r < 0)
		return r;
	do {
		n = recv(s->fd, space, size, MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? 1 : -errno;
	if (n == 0)
		return -ECONNRESET;
	ferry__frame_parser_commit(&s->parser, (size_t)n);
	return 1;
}

/* The next verified frame, waiting as read_some() does. Returns 1, 0 (timed out) or -errno. */
static int next_frame(struct ferry_plasma_subscription *s, int64_t timeout_ms,
		      struct ferry__frame *f)
{
	uint64_t deadline = ferry__now_ms() + (uint64_t)FERRY_MAX(timeout_ms, 0);
	int r;

	while ((r = ferry__frame_parser_next(&s->parser, f)) == 0) {
		int64_t left = timeout_ms < 0 ? -1 : (int64_t)(deadline - ferry__now_ms());

		if (timeout_ms >= 0 && ferry__now_ms() >= deadline)
			left = 0;
		r = read_some(s, left);
		if (r <= 0)
			return r;
	}
	if (r < 0)
		return r;
	if (ferry__wire_verify(f->type, f->payload, f->length) < 0) {
		FLOG_ERROR(comp, "subscription: malformed %s from the store",
			   ferry__wire_message_name(f->type));
		return -EPROTO;
	}
	return 1;
}

/* Take a PlasmaNotify into held (without memory for it, its events count as missed).
 * Returns 0 or -EPROTO. */
static int take_batch(struct ferry_plasma_subscription *s, const struct ferry__frame *f)
{
	struct ferry__wire_plasma_notify_view v;
	uint32_t n;

	if (f->type != FERRY__WIRE_MSG_PLASMA_NOTIFY) {
		FLOG_ERROR(comp, "subscription: unexpected %s from the store",
			   ferry__wire_message_name(f->type));
		return -EPROTO;
	}
	v = ferry__wire_plasma_notify_root_verified(f->payload);
	n = ferry__wire_plasma_notify_events_count(v);
	if (ferry__wire_plasma_notify_seq(v) != s->seq + 1)
		return -EPROTO; /* one connection: batches cannot be lost or reordered */
	s->seq++;
	s->missed += ferry__wire_plasma_notify_missed(v);
	s->held_count = s->held_next = 0;
	if (n > s->held_cap) {
		struct ferry_plasma_event *grown = ferry__realloc(s->held, n * sizeof(*grown));

		if (!grown) {
			FLOG_WARN(comp, "subscription: no memory for %u events: dropped", n);
			s->missed += n;
			return 0;
		}
		s->held = grown;
		s->held_cap = n;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct ferry__wire_plasma_event_view e = ferry__wire_plasma_notify_events_at(v, i);
		uint64_t meta = ferry__wire_plasma_event_metadata_size(e);

		s->held[i] = (struct ferry_plasma_event){
			.id = ferry__wire_plasma_event_object_id(e),
			.data_size = ferry__wire_plasma_event_data_size(e),
			.metadata_size = (uint32_t)FERRY_MIN(meta, UINT32_MAX),
			.kind = ferry__wire_plasma_event_kind(e),
			.primary = ferry__wire_plasma_event_primary(e),
		};
	}
	s->held_count = n;
	return 0;
}

static int hand_out(struct ferry_plasma_subscription *s, struct ferry_plasma_event *events,
		    size_t max, uint64_t *missed)
{
	size_t n = FERRY_MIN(max, s->held_count - s->held_next);

	if (n) /* held may be NULL: nothing was ever held */
		memcpy(events, s->held + s->held_next, n * sizeof(*events));
	s->held_next += n;
	if (missed)
		*missed = s->missed;
	s->missed = 0;
	return (int)n;
}

int ferry_plasma_subscription_read(struct ferry_plasma_subscription *s,
				   struct ferry_plasma_event *events, size_t max,
				   int64_t timeout_ms, uint64_t *missed)
{
	struct ferry__frame f;
	int r;

	if (missed)
		*missed = 0;
	if (!s || (max && !events))
		return -EINVAL;
	max = FERRY_MIN(max, (size_t)INT32_MAX);
	while (s->held_next == s->held_count && !s->missed) {
		if (s->error)
			return s->error;
		r = next_frame(s, timeout_ms, &f);
		if (r == 0)
			return 0;
		if (r > 0)
			r = take_batch(s, &f);
		if (r < 0)
			return s->error = r;
	}
	return hand_out(s, events, max, missed);
}

/* Send PlasmaSubscribe and read its PlasmaStatusReply. Returns its status or -errno. */
static int hello(struct ferry_plasma_subscription *s, const struct ferry_plasma_subscribe_opts *o)
{
	struct ferry__wire_plasma_subscribe m = {
		.seq = 1, .event_mask = o->events, .max_pending = o->max_pending};
	struct ferry__wire_plasma_status_reply_view v;
	struct ferry__fb_builder b = {0};
	struct ferry__frame f;
	const uint8_t *frame;
	size_t size;
	int r = ferry__wire_plasma_subscribe_build(&b, &m);

	if (r == 0)
		r = ferry__frame_finish(&b, FERRY__WIRE_MSG_PLASMA_SUBSCRIBE, &frame, &size);
	if (r == 0)
		r = ferry__pc_write_all(s->fd, frame, size);
	ferry__fb_builder_fini(&b);
	if (r == 0)
		r = next_frame(s, -1, &f);
	if (r < 0)
		return r;
	if (f.type != FERRY__WIRE_MSG_PLASMA_STATUS_REPLY)
		return -EPROTO;
	v = ferry__wire_plasma_status_reply_root_verified(f.payload);
	return ferry__wire_plasma_status_reply_seq(v) == 1
		       ? ferry__wire_plasma_status_reply_status(v)
		       : -EPROTO;
}

int ferry_plasma_client_subscribe(struct ferry_plasma_client *c,
				  const struct ferry_plasma_subscribe_opts *opts,
				  struct ferry_plasma_subscription **out)
{
	struct ferry_plasma_subscribe_opts o =
		opts ? *opts : (struct ferry_plasma_subscribe_opts){0};
	struct ferry_plasma_subscription *s;
	int r;

	if (!c || !out)
		return -EINVAL;
	s = ferry__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	ferry__frame_parser_init(&s->parser, 0);
	r = s->fd = ferry__pc_socket(c->socket_path, 0);
	if (r < 0)
		goto err_free;
	r = hello(s, &o);
	if (r < 0) {
		FLOG_WARN(comp, "subscription: refused: %s", ferry_strerror(r));
		goto err_close;
	}
	*out = s;
	return 0;

err_close:
	close(s->fd);
err_free:
	ferry__frame_parser_fini(&s->parser);
	ferry__free(s);
	return r;
}

int ferry_plasma_subscription_fd(const struct ferry_plasma_subscription *s)
{
	return s ? s->fd : -EINVAL;
}

void ferry_plasma_subscription_close(struct ferry_plasma_subscription *s)
{
	if (!s)
		return;
	close(s->fd);
	ferry__frame_parser_fini(&s->parser);
	ferry__free(s->held);
	ferry__free(s);
}
