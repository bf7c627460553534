/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA pulls, the pull thread's side: the steps it hands to the loop and waits for (probe,
 * READs, PullDone) and the copy it creates; the DESIGN is at the top of objmgr_rdma.c.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/client_arena.h"
#include "transport/objmgr_rdma_int.h"

#define COMP "objmgr"

/* ---- pulling: the pull thread's side ---- */

/* Run steps @f[0..@n) on the loop at once and wait for all. */
static void run_steps(struct ferry__objmgr *om, struct rfetch *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		f[i].om = om;
	ferry__objmgr_handoff_run(om, f, sizeof(*f), offsetof(struct rfetch, h), n,
				  ferry__objmgr_rdma_fetch_start);
}

static void step_init(struct rfetch *f, const struct rfetch *probe, enum rstep step, unsigned qp)
{
	memset(f, 0, sizeof(*f));
	f->step = step;
	f->id = probe->id;
	memcpy(f->ip, probe->ip, sizeof(f->ip));
	f->port = probe->port;
	f->qp = qp;
	f->xfer = probe->xfer;
	f->gen = probe->gen;
	f->raddr = probe->raddr;
	f->rkey = probe->rkey;
}

/* The QPs an object of @size is read over. */
static unsigned parts_for(const struct ferry__objmgr *om, uint64_t size)
{
	return size >= SPLIT_MIN ? om->opts.rdma_qps : 1;
}

/* READ the whole object into @dst: over every QP at once when it is large. */
static int read_all(struct ferry__objmgr *om, const struct rfetch *probe, uint8_t *dst)
{
	struct rfetch parts[MAX_QPS];
	uint64_t size = probe->data_size, step;
	unsigned n = parts_for(om, size), i;
	int ret = 0;

	step = (size / n + 65535) & ~(uint64_t)65535; /* 64 KiB-aligned parts */
	for (i = 0; i < n && i * step < size; i++) {
		uint64_t end = i + 1 == n || (i + 1) * step > size ? size : (i + 1) * step;

		/* Part 0 goes over the endpoint that holds the pin: if it dies, the pin goes
		 * and so does the pull (no part may then report success). */
		step_init(&parts[i], probe, STEP_READ, i);
		parts[i].dst = dst + i * step;
		parts[i].raddr = probe->raddr + i * step;
		parts[i].len = end - i * step;
	}
	run_steps(om, parts, i);
	for (unsigned k = 0; k < i; k++)
		if (parts[k].h.status < 0 && (ret == 0 || ret == -ECONNRESET))
			ret = parts[k].h.status;
	return ret;
}

/* A PullDone nobody waits for (on the loop): over the endpoint that took the pin, if it is
 * still the same one (else the pin went with the old one). */
struct done_later {
	struct ferry__objmgr *om; /* owner */
	char ip[48];		  /* the server */
	uint16_t port;		  /* its RDMA port */
	uint64_t gen;		  /* the pin endpoint's generation */
	uint64_t xfer;		  /* the pin */
};

static void done_later_run(void *arg, int status)
{
	struct done_later *d = arg;

	if (status == 0)
		ferry__objmgr_rdma_done_on_pin(d->om->rdma, d->ip, d->port, d->gen, d->xfer);
	ferry__free(d);
}

/*
 * Release the pin of @probe after its READs: waited for when parts went over other QPs (its
 * success proves the pin's endpoint lived until after them, so the bytes were the object's
 * throughout); else sent without waiting: the one READ succeeded on the pin's own connection,
 * which already proves that, and the wait was a loop round trip (~0.5 ms of a 1 MiB pull in
 * the soft-RoCE VM). A PullDone that cannot go leaves the pin to the endpoint's close or the
 * server's pin deadline. 0, or the waited PullDone's error.
 */
static int release_pin(struct ferry__objmgr *om, const struct rfetch *probe, bool waited)
{
	struct done_later *d;
	struct rfetch done;

	if (waited) {
		step_init(&done, probe, STEP_DONE, 0);
		run_steps(om, &done, 1);
		return done.h.status;
	}
	d = ferry__calloc(1, sizeof(*d));
	if (d) {
		*d = (struct done_later){
			.om = om, .port = probe->port, .gen = probe->gen, .xfer = probe->xfer};
		memcpy(d->ip, probe->ip, sizeof(d->ip));
		if (ferry__loop_post(om->loop, done_later_run, d) == 0)
			return 0;
		ferry__free(d);
	}
	FLOG_DEBUG(COMP, "PullDone to %s not sent: the pin waits for its deadline", probe->ip);
	return 0;
}

/*
 * Probe @probe and, when the directory's @sizes say the reply will pin the object (too large to
 * come inline), create the copy meanwhile: the store's round trip (~0.4 ms of a 1 MiB pull in
 * the soft-RoCE VM, where each thread wake-up costs ~0.1 ms) then overlaps the probe's instead
 * of following it. The reply is the truth: a failed probe, an inline answer or other sizes abort
 * the early copy, and the caller creates from the reply as without it. The early copy's
 * metadata is written from the reply. Returns the copy, admitted (the reply's size), or NULL:
 * none, nothing admitted.
 */
static void *probe_and_create(struct ferry__objmgr *om, struct rfetch *probe,
			      const struct ferry__objmgr_sizes *sizes)
{
	void *dst = NULL;
	unsigned posted;

	if (!sizes->data || sizes->data + sizes->metadata <= INLINE_MAX) {
		run_steps(om, probe, 1);
		return NULL;
	}
	probe->om = om;
	posted = ferry__objmgr_handoff_start(om, probe, sizeof(*probe), offsetof(struct rfetch, h),
					     1, ferry__objmgr_rdma_fetch_start);
	if (ferry__objmgr_rdma_create_early(om, &probe->id, sizes, false, &dst) < 0)
		dst = NULL; /* the create after the probe decides */
	ferry__objmgr_handoff_wait(om, probe, sizeof(*probe), offsetof(struct rfetch, h), 1,
				   posted);
	if (dst && !ferry__objmgr_rdma_reply_fits(probe, probe->h.status, sizes)) {
		FLOG_DEBUG(COMP, "the copy made during the probe does not fit its reply: again");
		(void)ferry_plasma_client_abort(om->store, &probe->id);
		ferry__objmgr_unadmit(om, sizes->data + sizes->metadata);
		ferry__objmgr_rdma_count_early(om, false);
		dst = NULL;
	} else if (dst) {
		ferry__objmgr_rdma_count_early(om, true);
	}
	if (dst && probe->metadata_size)
		memcpy((uint8_t *)dst + probe->data_size, probe->metadata, probe->metadata_size);
	return dst;
}

int ferry__objmgr_rdma_pull(struct ferry__objmgr *om, const struct ferry__node_addr *a,
			    const struct ferry_object_id *id,
			    const struct ferry__objmgr_sizes *sizes, uint64_t *bytes)
{
	struct rfetch probe;
	uint64_t total = 0;
	bool admitted;
	void *dst;
	int ret;

	memset(&probe, 0, sizeof(probe));
	probe.step = STEP_PROBE;
	probe.id = *id;
	snprintf(probe.ip, sizeof(probe.ip), "%s", a->ip);
	probe.port = a->rdma_port;
	dst = probe_and_create(om, &probe, sizes);
	admitted = dst != NULL;
	ret = probe.h.status;
	if (ret < 0)
		goto out_free;
	total = probe.data_size + probe.metadata_size;
	if (!dst) {
		ret = ferry__objmgr_admit(om, total);
		admitted = ret == 0;
		if (ret == 0)
			ret = ferry_plasma_client_create_owned(
				om->store, id, probe.data_size, probe.metadata, probe.metadata_size,
				FERRY_PLASMA_CREATE_SECONDARY, &sizes->owner, &dst);
	}
	if (ret == 0 && probe.inline_all && probe.data_size)
		memcpy(dst, probe.data, probe.data_size);
	else if (ret == 0 && !probe.inline_all)
		ret = read_all(om, &probe, dst);
	if (!probe.inline_all) {
		/* Release the server's pin, whatever happened here. If the endpoint that took
		 * it is gone, the pin went with it, maybe before a part on another QP finished
		 * reading: then the bytes cannot be trusted. */
		int done = release_pin(om, &probe, ret < 0 || parts_for(om, probe.data_size) > 1);

		if (ret == 0 && done < 0)
			ret = done;
	}
	if (dst) {
		ret = ret == 0 ? ferry_plasma_client_seal(om->store, id) : ret;
		if (ret < 0)
			(void)ferry_plasma_client_abort(om->store, id);
	}
	if (ret == 0)
		*bytes = total;
	if (admitted)
		ferry__objmgr_unadmit(om, total);
out_free:
	ferry__free(probe.metadata);
	ferry__free(probe.data);
	return ret;
}
