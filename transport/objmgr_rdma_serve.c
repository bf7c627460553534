/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The serving side of the object manager's RDMA: accept pullers' endpoints, answer each
 * PullRequest from the own store (inline, or pinned with its address and rkey), release pins
 * at PullDone, at the endpoint's close or at their deadline. See objmgr_rdma.c's DESIGN.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/wire.h"
#include "plasma/client_arena.h"
#include "transport/objmgr_rdma_int.h"

#define COMP "objmgr"

static void pin_release(struct ferry__objmgr_rdma *r, struct rpin *p)
{
	(void)ferry_plasma_client_release(r->om->store, &p->view);
	ferry__free(p);
}

void ferry__objmgr_rdma_serve_free(struct rserve *s)
{
	struct ferry__objmgr_rdma *r = s->r;
	struct rpin *p;

	for (struct rserve **pp = &r->served; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	while ((p = s->pins)) {
		s->pins = p->next;
		pin_release(r, p);
	}
	ferry__rdma_ep_destroy(s->ep);
	ferry__free(s);
}

/* The reply to a verified PullRequest; @pin is set when the object stays pinned. */
static int build_reply(struct rserve *s, const void *req, struct ferry_plasma_view *view,
		       int status, bool *keep)
{
	struct ferry__wire_pull_request_view v = ferry__wire_pull_request_root_verified(req);
	struct ferry__wire_pull_reply m;
	uint64_t off;
	uint32_t rkey;

	memset(&m, 0, sizeof(m));
	*keep = false;
	if (status == 0 && ferry__wire_pull_request_offset(v) != 0)
		status = -EINVAL; /* RDMA probes ask for the object from its start */
	if (status == 0 && view->metadata_size > INLINE_MAX)
		status = -E2BIG; /* the puller falls back to TCP, which carries it */
	if (status == 0 && s->npins >= MAX_PINS &&
	    view->data_size + view->metadata_size > INLINE_MAX)
		status = -EBUSY;
	m.xfer = ferry__wire_pull_request_xfer(v);
	m.status = status;
	if (status < 0)
		return ferry__wire_pull_reply_build(&s->r->fb, &m);
	m.data_size = view->data_size;
	m.metadata = view->metadata;
	m.metadata_count = view->metadata_size;
	if (ferry__wire_pull_request_want_inline(v) &&
	    view->data_size + view->metadata_size <= INLINE_MAX &&
	    view->data_size <= ferry__wire_pull_request_len(v)) {
		m.data = view->data;
		m.data_count = view->data_size;
	} else {
		ferry__rdma_ctx_region(s->r->ctx, NULL, &rkey);
		/* The arena is registered at our mapping's addresses: the view's pointer is the
		 * remote address. */
		m.rdma_addr = (uint64_t)(uintptr_t)view->data;
		m.rdma_rkey = rkey;
		/* The placement's id lets a puller that READ before this reply (from the
		 * directory's place) know whether those bytes were this object's. */
		if (ferry__plasma_client_view_place(s->r->om->store, view, &off, &m.alloc) < 0)
			m.alloc = 0; /* cannot happen with a pinned view; 0 makes no claim */
		*keep = true;
	}
	return ferry__wire_pull_reply_build(&s->r->fb, &m);
}

static void serve_request(struct rserve *s, const void *payload)
{
	struct ferry__objmgr *om = s->r->om;
	struct ferry__wire_pull_request_view v = ferry__wire_pull_request_root_verified(payload);
	struct ferry_object_id id = ferry__wire_pull_request_object_id(v);
	struct ferry_plasma_view view = {0};
	struct rpin *pin = NULL;
	bool keep;
	int status, ret;

	status = ferry__objmgr_store_get(om, &id, &view);
	/* Counted before the reply goes: a puller that has its object sees it counted. */
	pthread_mutex_lock(&om->lock);
	om->stats.requests_served++;
	om->stats.requests_refused += status < 0;
	om->stats.bytes_served += status < 0 ? 0 : view.data_size;
	pthread_mutex_unlock(&om->lock);
	ret = build_reply(s, payload, &view, status, &keep);
	if (ret == 0 && keep) {
		pin = ferry__calloc(1, sizeof(*pin));
		ret = pin ? 0 : -ENOMEM;
	}
	if (ret == 0)
		ret = ferry__objmgr_rdma_send_built(s->ep, &s->r->fb, FERRY__WIRE_MSG_PULL_REPLY);
	if (ret == 0 && pin) {
		pin->xfer = ferry__wire_pull_request_xfer(v);
		pin->view = view;
		pin->expires_ms = ferry__loop_now_ms() + 2ull * om->opts.timeout_ms;
		pin->next = s->pins;
		s->pins = pin;
		s->npins++;
	} else {
		ferry__free(pin);
		if (status == 0)
			(void)ferry_plasma_client_release(om->store, &view);
	}
	if (ret < 0) {
		FLOG_WARN(COMP, "cannot answer an RDMA pull: %s", ferry_strerror(-ret));
		ferry__objmgr_rdma_serve_free(s);
	}
}

static void serve_done(struct rserve *s, const void *payload)
{
	uint64_t xfer = ferry__wire_pull_done_xfer(ferry__wire_pull_done_root_verified(payload));

	for (struct rpin **pp = &s->pins; *pp; pp = &(*pp)->next) {
		struct rpin *p = *pp;

		if (p->xfer == xfer) {
			*pp = p->next;
			s->npins--;
			pin_release(s->r, p);
			return;
		}
	}
	FLOG_DEBUG(COMP, "PullDone for an unknown transfer %llu", (unsigned long long)xfer);
}

static void serve_message(struct ferry__rdma_ep *ep, const void *buf, size_t len, void *arg)
{
	struct rserve *s = arg;
	const void *payload;
	size_t plen;
	uint16_t type;

	(void)ep;
	if (ferry__objmgr_unwrap_request(buf, len, &type, &payload, &plen) < 0) {
		FLOG_WARN(COMP, "malformed RDMA request from a puller: closing");
		ferry__objmgr_rdma_serve_free(s);
		return;
	}
	if (type == FERRY__WIRE_MSG_PULL_REQUEST)
		serve_request(s, payload);
	else
		serve_done(s, payload);
}

static void serve_close(struct ferry__rdma_ep *ep, int reason, void *arg)
{
	struct rserve *s = arg;

	(void)ep;
	if (s->npins)
		FLOG_INFO(COMP, "a puller's RDMA endpoint closed (%s): releasing %u pins",
			  ferry_strerror(-reason), s->npins);
	ferry__objmgr_rdma_serve_free(s);
}

static void serve_accept(struct ferry__rdma_ep *ep, int status, void *arg)
{
	struct ferry__objmgr_rdma *r = arg;
	struct rserve *s;

	if (status < 0)
		return;
	s = ferry__calloc(1, sizeof(*s));
	if (!s) {
		FLOG_WARN(COMP, "no memory for an RDMA puller: closing it");
		ferry__rdma_ep_destroy(ep);
		return;
	}
	s->r = r;
	s->ep = ep;
	s->next = r->served;
	r->served = s;
	ferry__rdma_ep_set_arg(ep, s);
}

const struct ferry__rdma_ep_cbs ferry__objmgr_rdma_serve_cbs = {
	.on_connect = serve_accept,
	.on_message = serve_message,
	.on_close = serve_close,
};

/* Pins of pullers that stay connected but never said done: released at their deadline. */
void ferry__objmgr_rdma_sweep_pins(struct ferry__loop_timer *t, int status)
{
	struct ferry__objmgr_rdma *r = t->data;
	uint64_t now = ferry__loop_now_ms();

	if (status < 0)
		return;
	for (struct rserve *s = r->served; s; s = s->next) {
		for (struct rpin **pp = &s->pins; *pp;) {
			struct rpin *p = *pp;

			if (p->expires_ms > now) {
				pp = &p->next;
				continue;
			}
			FLOG_WARN(COMP, "an RDMA puller held a pin past its deadline: released");
			*pp = p->next;
			s->npins--;
			pin_release(r, p);
		}
	}
}
