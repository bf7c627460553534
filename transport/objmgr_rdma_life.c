/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object manager's RDMA engine on the loop (its fds' polls, its timer, the spin poller)
 * and the RDMA side's life cycle; the DESIGN is at the top of objmgr_rdma.c.
 */
#include <errno.h>
#include <stddef.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "plasma/client_arena.h"
#include "transport/objmgr_rdma_int.h"

#define COMP "objmgr"

/* ---- driving the engine on the loop ---- */

void ferry__objmgr_rdma_drive(struct ferry__objmgr_rdma *r)
{
	int t = 0, n;

	if (!r->ctx)
		return;
	if (r->driving) {
		r->again = true;
		return;
	}
	r->driving = true;
	for (unsigned round = 0; round < 64; round++) {
		r->again = false;
		n = ferry__rdma_progress(r->ctx);
		if (n < 0)
			FLOG_ERROR(COMP, "RDMA event channel failed: %s", ferry_strerror(-n));
		t = ferry__rdma_ctx_timeout_ms(r->ctx);
		if (t != 0 && !r->again)
			break;
	}
	r->driving = false;
	if (t >= 0 && !r->shut)
		(void)ferry__loop_timer_start(r->om->loop, &r->tick, (uint64_t)t, 0, r->tick.cb);
	else
		(void)ferry__loop_timer_stop(&r->tick);
}

/*
 * The loop's poller while it spins (opts.spin_us): the CQ is polled on every spin pass and its
 * event armed only when the loop is about to sleep (see ferry__loop_set_poller).
 */
int ferry__objmgr_rdma_engine_poll(void *arg, bool sleeping)
{
	struct ferry__objmgr_rdma *r = arg;
	int n;

	if (!r->ctx || r->shut)
		return 0;
	n = ferry__rdma_poll(r->ctx, sleeping);
	/* Once per episode: a spinning loop would log it on every pass. */
	if (n < 0 && !r->cq_failing)
		FLOG_ERROR(COMP, "RDMA completion queue failed: %s", ferry_strerror(-n));
	r->cq_failing = n < 0;
	if (n != 0)
		ferry__objmgr_rdma_drive(
			r); /* endpoints the completions failed, deadlines, the tick */
	return n;
}

int ferry__objmgr_rdma_spin_poll(struct ferry__objmgr *om, bool sleeping)
{
	return om->rdma ? ferry__objmgr_rdma_engine_poll(om->rdma, sleeping) : 0;
}

static void on_tick(struct ferry__loop_timer *t, int status)
{
	if (status == 0)
		ferry__objmgr_rdma_drive(t->data);
}

static void on_ready(struct ferry__loop_req *req, int result)
{
	struct ferry__objmgr_rdma *r = req->data;

	if (r->shut)
		return;
	ferry__objmgr_rdma_drive(r);
	if (result < 0 || !ferry__loop_req_pending(req)) { /* the kernel ended the multishot */
		int cm_fd, cq_fd, ret;

		ferry__rdma_ctx_fds(r->ctx, &cm_fd, &cq_fd);
		ret = ferry__loop_poll(r->om->loop, req, req == &r->cm_poll ? cm_fd : cq_fd, POLLIN,
				       true, on_ready);
		if (ret < 0)
			FLOG_ERROR(COMP, "cannot watch the RDMA fds again: %s",
				   ferry_strerror(-ret));
	}
}

static int arm_polls(struct ferry__objmgr_rdma *r)
{
	int cm_fd, cq_fd, ret;

	ferry__rdma_ctx_fds(r->ctx, &cm_fd, &cq_fd);
	r->cm_poll.data = r;
	r->cq_poll.data = r;
	ret = ferry__loop_poll(r->om->loop, &r->cm_poll, cm_fd, POLLIN, true, on_ready);
	if (ret == 0)
		ret = ferry__loop_poll(r->om->loop, &r->cq_poll, cq_fd, POLLIN, true, on_ready);
	return ret;
}

/* ---- life cycle ---- */

int ferry__objmgr_rdma_start(struct ferry__objmgr *om)
{
	/* A spinning loop polls the CQ itself, so only it may arm the event: the two go together
	 * (an unarmed CQ with nobody polling it would never wake the loop). */
	bool loop_polls = om->opts.spin_us > 0;
	struct ferry__rdma_ctx_opts o = {0};
	struct ferry__objmgr_rdma *r;
	void *base;
	uint64_t size;
	int ret;

	r = ferry__calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->om = om;
	om->rdma = r;
	ferry__objmgr_peer_set_init(&r->peers, &ferry__objmgr_rdma_peer_ops, om->loop,
				    om->opts.timeout_ms);
	ferry__plasma_client_arena(om->store, &base, &size);
	o.ip = om->ip;
	o.region = base;
	o.region_size = size;
	o.token = om->token;
	o.token_size = om->opts.token_len;
	o.msg_size = MSG_SIZE;
	o.connect_timeout_ms = om->opts.timeout_ms;
	o.op_timeout_ms = om->opts.timeout_ms;
	o.max_reads = 2 * om->opts.rdma_depth;
	o.busy_poll = om->opts.rdma_busy_poll;
	o.caller_arms = loop_polls;
	ret = ferry__rdma_ctx_create(&o, &r->ctx);
	if (ret < 0)
		return ret; /* the caller logs: -ENODEV is expected where there is no device */
	ret = ferry__rdma_listen(r->ctx, om->ip, om->opts.rdma_port, &ferry__objmgr_rdma_serve_cbs,
				 r, &r->listener);
	if (ret < 0) {
		FLOG_ERROR(COMP, "cannot listen for RDMA on %s:%u: %s", om->ip, om->opts.rdma_port,
			   ferry_strerror(-ret));
		return ret;
	}
	om->rdma_port = ferry__rdma_listener_port(r->listener);
	r->tick.data = r;
	r->tick.cb = on_tick;
	r->sweep.data = r;
	ret = arm_polls(r);
	if (ret == 0)
		ret = ferry__loop_timer_start(om->loop, &r->sweep, 1000, 1000,
					      ferry__objmgr_rdma_sweep_pins);
	if (ret < 0)
		return ret;
	FLOG_INFO(COMP, "RDMA on %s (%s:%u), arena of %llu MiB registered once",
		  ferry__rdma_ctx_device(r->ctx), om->ip, om->rdma_port,
		  (unsigned long long)(size >> 20));
	return 0;
}

const char *ferry__objmgr_rdma_device(const struct ferry__objmgr *om)
{
	struct ferry__objmgr_rdma *r = om->rdma;

	return r && r->ctx && !r->shut ? ferry__rdma_ctx_device(r->ctx) : NULL;
}

void ferry__objmgr_rdma_shutdown(struct ferry__objmgr *om)
{
	struct ferry__objmgr_rdma *r = om->rdma;

	if (!r || r->shut)
		return;
	r->shut = true; /* ferry__objmgr_rdma_spin_poll() does nothing from here */
	(void)ferry__loop_timer_stop(&r->tick);
	(void)ferry__loop_timer_stop(&r->sweep);
	if (ferry__loop_req_pending(&r->cm_poll))
		(void)ferry__loop_cancel(&r->cm_poll);
	if (ferry__loop_req_pending(&r->cq_poll))
		(void)ferry__loop_cancel(&r->cq_poll);
	ferry__objmgr_peer_drop_all(&r->peers, -ECANCELED);
	while (r->served)
		ferry__objmgr_rdma_serve_free(r->served);
	ferry__rdma_listener_destroy(r->listener);
	r->listener = NULL;
}

void ferry__objmgr_rdma_free(struct ferry__objmgr *om)
{
	struct ferry__objmgr_rdma *r = om->rdma;

	if (!r)
		return;
	/* The loop is gone: no poll can still name the fds the context closes. */
	ferry__rdma_ctx_destroy(r->ctx);
	ferry__fb_builder_fini(&r->fb);
	ferry__free(r);
	om->rdma = NULL;
}

/* ---- test hook ---- */

struct inject {
	struct ferry__objmgr *om;	/* whose engine */
	int fault;			/* enum ferry__rdma_fault */
	unsigned nth;			/* which completion */
	struct ferry__objmgr_handoff h; /* result; the caller's wait for it */
};

static void inject_on_loop(void *arg, int status)
{
	struct inject *in = arg;
	struct ferry__objmgr_rdma *r = in->om->rdma;

	if (status == 0 && r && r->ctx && !r->shut)
		ferry__rdma_inject_fault(r->ctx, (enum ferry__rdma_fault)in->fault, in->nth);
	else
		status = status < 0 ? status : -ENODEV;
	ferry__objmgr_handoff_done(in->om, &in->h, status);
}

int ferry__objmgr_rdma_inject_fault(struct ferry__objmgr *om, int fault, unsigned nth)
{
	struct inject in = {.om = om, .fault = fault, .nth = nth};

	if (!om->rdma)
		return -ENODEV;
	ferry__objmgr_handoff_run(om, &in, sizeof(in), offsetof(struct inject, h), 1,
				  inject_on_loop);
	return in.h.status;
}
