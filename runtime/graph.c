/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Compiled graphs on the driver's side (include/ferry/runtime.h): bind, compile (install the
 * plan in the actors' workers), execute, get, destroy. The workers' side is graph_worker.c;
 * schema/runtime.fbs the protocol.
 *
 * DESIGN
 * - A compiled graph holds one blocking Unix socket per worker of its actors, opened from the
 *   caller's thread: an execution writes its inputs on the sockets of the workers that take
 *   them and reads its output from the output node's worker, with no hop through the
 *   runtime's loop thread, no lease, no task and no owner-table entry. The actors' state is
 *   read once, at compile, on the loop (ferry__loop_call): their worker and node.
 * - Beside each socket, a same-host ring pair (runtime/ring.h, ring_fd.c: offered right after
 *   RuntimeConnect; FERRY_RING=off keeps all on the sockets): an execution's inputs and its
 *   output go through shared memory when they fit a slot, in order with what takes the
 *   socket. The reader takes the rings first, spins on them up to FERRY_RING_SPIN_US (the
 *   loops' window) and then sleeps in poll on the sockets and the rings' eventfds.
 * - Executions sit in a window of FERRY_GRAPH_MAX_INFLIGHT slots (seq % window): execute takes
 *   the next one (-EAGAIN while it is not gotten yet), get frees it. The workers keep the same
 *   window per node, which this bound keeps them inside.
 * - Locks: g->lock guards the slots and the broken state; g->send_lock the builder and every
 *   write (frames of one execution go out together); reading is one thread at a time (the
 *   g->reading flag, under g->lock): the reader polls every socket, files what comes into the
 *   slots and broadcasts g->cond, where other getters wait. Lock order: send_lock, then lock.
 * - A worker's socket closing (its actor died, was killed or its owner dropped it: the worker
 *   closes the graph's socket when its actor ends) breaks the graph: every slot in flight and
 *   every later execution fails with -EPIPE and a message naming the node, its method and node.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/cond.h"
#include "common/frame.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/net.h"
#include "common/util.h"
#include "common/wire.h"
#include "runtime/actor.h"
#include "runtime/dial.h"
#include "runtime/ring.h"
#include "runtime/rt.h"
#include "runtime/worker.h"

#define COMP "runtime"
#define WINDOW FERRY_GRAPH_MAX_INFLIGHT
#define FRAME_MAX (64u << 20) /* runtime.fbs: the receiver's frame cap */
#define DESTROY_WAIT_MS 5000  /* how long destroy waits for the workers to confirm */
#define ALIVE_POLL_MS 10      /* compile looks at a PENDING actor again after this */

enum { SLOT_FREE, SLOT_WAITING, SLOT_DONE };

struct gslot {
	uint64_t seq;  /* its execution */
	uint8_t state; /* SLOT_* */
	int status;    /* DONE: 0 or -errno */
	void *data;    /* DONE, status 0: the result (ferry__malloc'd) */
	size_t len;    /* its size */
	char *message; /* DONE, status < 0: why (ferry__malloc'd) */
};

struct gnode {
	struct ferry_actor *actor;		  /* borrowed handle */
	char method[FERRY_FUNCTION_NAME_MAX + 1]; /* "Class.method" */
	struct ferry_graph_arg *args;		  /* nargs; CONST data points into consts */
	void **consts;				  /* nargs: the CONST copies, or NULL */
	uint32_t nargs;				  /* how many */
	uint32_t worker;			  /* compiled: index in g->workers */
	bool used;				  /* another node takes its result */
};

struct gworker {
	struct ferry__rt_actor *a;				/* the actor it hosts */
	struct ferry_worker_id id;				/* the worker */
	struct ferry_node_id node;				/* its node */
	struct ferry_actor_id actor;				/* the actor's ID */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* its listen path */
	int fd;							/* our socket to it; -1: none */
	struct ferry__rt_fdring *ring;				/* beside fd, or NULL */
	struct ferry__frame_parser parser;			/* what it sends */
	int install_status;    /* GraphInstallReply: 1 until it came */
	char install_why[256]; /* its message */
	uint32_t graphs;       /* graphs it held after ours */
	bool destroyed;	       /* GraphDestroyReply came */
	bool dead;	       /* its socket closed (fd kept until destroy) */
};

struct ferry_graph {
	pthread_mutex_t lock;		 /* see DESIGN */
	pthread_cond_t cond;		 /* a slot is done, or the reader left */
	pthread_mutex_t send_lock;	 /* the builder and writes */
	struct ferry__fb_builder fb;	 /* frames are built here (send_lock) */
	struct ferry__wire_unique_id id; /* the graph's ID on the workers */
	struct gnode *nodes;		 /* bound so far */
	uint32_t nnodes;		 /* how many */
	uint32_t ninputs;		 /* highest input index + 1 */
	struct gworker *workers;	 /* compiled: one per actor */
	uint32_t nworkers;		 /* how many */
	bool compiled;			 /* executions may start */
	bool failed;			 /* compile failed: only destroy */
	bool reading;			 /* a thread polls the sockets */
	int broken;			 /* 0, or what every execution fails with */
	char broken_why[512];		 /* and why */
	uint64_t next_seq;		 /* the next execution's */
	int max_graphs;			 /* ferry_graph_worker_graphs() */
	unsigned spin_us;		 /* a reader polls the rings this long, then sleeps */
	struct gslot slots[WINDOW];	 /* seq % WINDOW */
};

/* ---- bind ---- */

int ferry_graph_create(struct ferry_graph **out)
{
	struct ferry_graph *g;

	if (!out)
		return -EINVAL;
	if (!ferry__rt.up)
		return -ENOTCONN;
	g = ferry__calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	pthread_mutex_init(&g->lock, NULL);
	pthread_mutex_init(&g->send_lock, NULL);
	ferry__cond_init_monotonic(&g->cond);
	ferry__fb_builder_init(&g->fb);
	ferry_id_random(g->id.bytes, sizeof(g->id.bytes));
	g->spin_us = ferry__rt_ring_spin_us();
	*out = g;
	return 0;
}

static int bind_args(struct ferry_graph *g, struct gnode *n, const struct ferry_graph_arg *args,
		     size_t nargs)
{
	for (size_t i = 0; i < nargs; i++) {
		const struct ferry_graph_arg *a = &args[i];
		struct ferry_graph_arg *to = &n->args[i];

		*to = *a;
		to->data = NULL;
		if (a->kind == FERRY_GRAPH_ARG_INPUT) {
			if (a->index >= FERRY_GRAPH_MAX_ARGS)
				return -EINVAL;
		} else if (a->kind == FERRY_GRAPH_ARG_NODE) {
			if (a->index >= g->nnodes)
				return -EINVAL;
		} else if (a->kind == FERRY_GRAPH_ARG_CONST) {
			if (a->len && !a->data)
				return -EINVAL;
			n->consts[i] = ferry__malloc(a->len ? a->len : 1);
			if (!n->consts[i])
				return -ENOMEM;
			if (a->len)
				memcpy(n->consts[i], a->data, a->len);
			to->data = n->consts[i];
		} else {
			return -EINVAL;
		}
	}
	return 0;
}

static void node_free(struct gnode *n)
{
	for (uint32_t i = 0; n->consts && i < n->nargs; i++)
		ferry__free(n->consts[i]);
	ferry__free(n->consts);
	ferry__free(n->args);
}

static bool has_dynamic(const struct ferry_graph_arg *args, size_t nargs)
{
	for (size_t i = 0; i < nargs; i++)
		if (args[i].kind == FERRY_GRAPH_ARG_INPUT || args[i].kind == FERRY_GRAPH_ARG_NODE)
			return true;
	return false;
}

int ferry_graph_bind(struct ferry_graph *g, struct ferry_actor *actor, const char *method,
		     const struct ferry_graph_arg *args, size_t nargs)
{
	size_t mlen = method ? strnlen(method, FERRY_FUNCTION_NAME_MAX + 1) : 0;
	struct gnode *nodes, *n;
	int ret;

	if (!g || !actor || !mlen || mlen > FERRY_FUNCTION_NAME_MAX || !memchr(method, '.', mlen) ||
	    (nargs && !args) || nargs > FERRY_GRAPH_MAX_ARGS || !has_dynamic(args, nargs)) {
		FLOG_ERROR(COMP, "graph bind of \"%.*s\": %s", (int)FERRY_MIN(mlen, 128u),
			   method ? method : "",
			   nargs && args && !has_dynamic(args, nargs)
				   ? "it takes no input and no node's result (nothing would run it)"
				   : "bad arguments");
		return -EINVAL;
	}
	pthread_mutex_lock(&g->lock);
	ret = g->compiled || g->failed || g->nnodes >= FERRY_GRAPH_MAX_NODES ? -EINVAL : 0;
	nodes = ret ? NULL : ferry__realloc(g->nodes, (g->nnodes + 1) * sizeof(*nodes));
	if (!ret && !nodes)
		ret = -ENOMEM;
	if (ret)
		goto out;
	g->nodes = nodes;
	n = &nodes[g->nnodes];
	memset(n, 0, sizeof(*n));
	n->actor = actor;
	memcpy(n->method, method, mlen);
	n->args = ferry__calloc(FERRY_MAX(nargs, (size_t)1), sizeof(*n->args));
	n->consts = ferry__calloc(FERRY_MAX(nargs, (size_t)1), sizeof(*n->consts));
	n->nargs = (uint32_t)nargs;
	ret = n->args && n->consts ? bind_args(g, n, args, nargs) : -ENOMEM;
	if (ret < 0) {
		node_free(n);
		goto out;
	}
	for (size_t i = 0; i < nargs; i++) {
		if (args[i].kind == FERRY_GRAPH_ARG_NODE)
			nodes[args[i].index].used = true;
		if (args[i].kind == FERRY_GRAPH_ARG_INPUT)
			g->ninputs = FERRY_MAX(g->ninputs, args[i].index + 1);
	}
	ret = (int)g->nnodes++;
out:
	pthread_mutex_unlock(&g->lock);
	if (ret < 0)
		FLOG_ERROR(COMP, "graph bind of %s: %s", method, ferry_strerror(ret));
	return ret;
}

/* ---- sockets ---- */

static void worker_close(struct gworker *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	ferry__rt_fdring_destroy(w->ring);
	w->ring = NULL;
}

/* Send the builder's payload (send_lock held): on the worker's ring when it takes it, else a
 * whole frame on the socket. */
static int send_frame(struct ferry_graph *g, struct gworker *w, uint16_t type)
{
	const uint8_t *frame;
	size_t size, done = 0;
	int ret;

	if (w->fd < 0)
		return -EPIPE;
	ret = ferry__rt_fdring_put(w->ring, type, ferry__fb_builder_data(&g->fb),
				   ferry__fb_builder_size(&g->fb));
	if (ret <= 0)
		return ret == 0 ? 0 : -EPIPE; /* -EPROTO: the worker wrote garbage (logged) */
	ret = ferry__frame_finish(&g->fb, type, &frame, &size);
	if (ret < 0)
		return ret;
	while (done < size) {
		ssize_t n = send(w->fd, frame + done, size - done, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	ferry__rt_fdring_sent(w->ring);
	return 0;
}

static int worker_connect(struct ferry_graph *g, struct gworker *w)
{
	struct ferry__wire_runtime_connect m = {
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
		.kind = FERRY__WIRE_PEER_KIND_DRIVER,
		.pid = (int32_t)getpid(),
	};
	struct sockaddr_storage ss;
	socklen_t sl;
	int ret = ferry__net_unix_addr(w->path, &ss, &sl);

	if (ret < 0)
		return ret;
	w->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (w->fd < 0)
		return -errno;
	if (connect(w->fd, (struct sockaddr *)&ss, sl) < 0) {
		ret = -errno;
		worker_close(w);
		return ret;
	}
	memcpy(m.id.bytes, ferry__rt.self.bytes, sizeof(m.id.bytes));
	memcpy(m.job.bytes, ferry__rt.job.bytes, sizeof(m.job.bytes));
	ret = ferry__wire_runtime_connect_build(&g->fb, &m);
	if (ret == 0)
		ret = send_frame(g, w, FERRY__WIRE_MSG_RUNTIME_CONNECT);
	/* The worker is on this host (a Unix path): offer it a ring pair, as a lease does. Its
	 * reply comes before its GraphInstallReply, so compile ends with the ring settled. */
	if (ret == 0 && ferry__rt_ring_enabled())
		(void)ferry__rt_fdring_offer(w->fd, &w->ring);
	return ret;
}

/* The first node on worker @wi, for messages. */
static const struct gnode *first_node(const struct ferry_graph *g, uint32_t wi, uint32_t *index)
{
	for (uint32_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i].worker == wi) {
			*index = i;
			return &g->nodes[i];
		}
	*index = 0;
	return &g->nodes[0];
}

static void slot_done(struct gslot *s, int status, const char *message, size_t mlen)
{
	s->state = SLOT_DONE;
	s->status = status;
	if (status < 0) {
		s->message = ferry__malloc(mlen + 1);
		if (s->message) {
			memcpy(s->message, message, mlen);
			s->message[mlen] = 0;
		}
	}
}

/* Worker @wi's socket closed (lock held): the graph is broken. */
static void break_graph(struct ferry_graph *g, uint32_t wi, const char *how)
{
	struct gworker *w = &g->workers[wi];
	char hex[FERRY_ID_HEX_MAX];
	uint32_t index;
	const struct gnode *n = first_node(g, wi, &index);

	/* The fd stays open until destroy: a writer may be using it now (EPIPE, then). */
	w->dead = true;
	if (g->broken)
		return;
	ferry_node_id_to_hex(&w->node, hex, sizeof(hex));
	g->broken = -EPIPE;
	snprintf(g->broken_why, sizeof(g->broken_why),
		 "graph node %" PRIu32 " (%s) on node %.12s: the actor's worker %s (the actor "
		 "died, was killed, or its owner dropped it): the graph is broken",
		 index, n->method, hex, how);
	FLOG_WARN(COMP, "%s", g->broken_why);
	for (uint32_t k = 0; k < WINDOW; k++)
		if (g->slots[k].state == SLOT_WAITING)
			slot_done(&g->slots[k], g->broken, g->broken_why, strlen(g->broken_why));
}

/* A verified frame from worker @wi (lock held). */
static void on_frame(struct ferry_graph *g, uint32_t wi, const struct ferry__frame *f)
{
	struct gworker *w = &g->workers[wi];

	if (f->type == FERRY__WIRE_MSG_GRAPH_DATA) {
		struct ferry__wire_graph_data_view v =
			ferry__wire_graph_data_root_verified(f->payload);
		uint64_t seq = ferry__wire_graph_data_seq(v);
		struct gslot *s = &g->slots[seq % WINDOW];
		int status = ferry__wire_graph_data_status(v);
		size_t len = ferry__wire_graph_data_data_count(v);
		const char *m = ferry__wire_graph_data_message(v);

		if (s->seq != seq || s->state != SLOT_WAITING) {
			FLOG_WARN(COMP,
				  "graph: a result for execution %" PRIu64 " that does not wait",
				  seq);
			return;
		}
		if (status == 0 && len) {
			s->data = ferry__malloc(len);
			if (!s->data) {
				slot_done(s, -ENOMEM, "out of memory for the result",
					  strlen("out of memory for the result"));
				return;
			}
			memcpy(s->data, ferry__wire_graph_data_data_data(v), len);
			s->len = len;
		}
		slot_done(s, status > 0 ? -EPROTO : status, m ? m : "",
			  m ? ferry__wire_graph_data_message_len(v) : 0);
	} else if (f->type == FERRY__WIRE_MSG_GRAPH_INSTALL_REPLY) {
		struct ferry__wire_graph_install_reply_view v =
			ferry__wire_graph_install_reply_root_verified(f->payload);
		const char *m = ferry__wire_graph_install_reply_message(v);

		w->install_status = ferry__wire_graph_install_reply_status(v);
		w->graphs = ferry__wire_graph_install_reply_graphs(v);
		snprintf(w->install_why, sizeof(w->install_why), "%.*s",
			 m ? (int)ferry__wire_graph_install_reply_message_len(v) : 0, m ? m : "");
	} else if (f->type == FERRY__WIRE_MSG_GRAPH_DESTROY_REPLY) {
		w->destroyed = true;
	} else if (f->type == FERRY__WIRE_MSG_RING_SETUP_REPLY) {
		(void)ferry__rt_fdring_setup_reply(&w->ring, f->payload, f->length);
	} else {
		FLOG_WARN(COMP, "graph: worker %s sent an unexpected %s", w->path,
			  ferry__wire_message_name(f->type));
	}
}

/* Worker @wi's ring, for ring_deliver. */
struct reader {
	struct ferry_graph *g; /* the graph */
	uint32_t wi;	       /* the worker */
};

/* A message from a worker's ring (lock held): as a frame from its socket. */
static void ring_deliver(void *arg, uint16_t type, const void *payload, size_t len)
{
	const struct reader *rd = arg;
	struct ferry__frame f = {.type = type, .length = (uint32_t)len, .payload = payload};

	on_frame(rd->g, rd->wi, &f);
}

/* Read what worker @wi sent and file it; -errno when its socket is done. */
static int read_worker(struct ferry_graph *g, uint32_t wi)
{
	struct reader rd = {g, wi};
	struct gworker *w = &g->workers[wi];
	struct ferry__frame f;
	uint8_t *space;
	size_t size;
	ssize_t n;
	int ret = ferry__frame_parser_space(&w->parser, &space, &size);

	if (ret < 0)
		return ret;
	n = recv(w->fd, space, size, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return n == 0 ? -ECONNRESET : -errno;
	ferry__frame_parser_commit(&w->parser, (size_t)n);
	pthread_mutex_lock(&g->lock);
	while ((ret = ferry__frame_parser_next(&w->parser, &f)) == 1) {
		ret = ferry__wire_verify(f.type, f.payload, f.length);
		if (ret == 0) /* what the ring held came first */
			ret = ferry__rt_fdring_on_socket(w->ring, f.type, ring_deliver, &rd);
		if (ret < 0)
			break;
		on_frame(g, wi, &f);
	}
	pthread_mutex_unlock(&g->lock);
	return ret < 0 ? ret : 0;
}

/* Take what the live workers' rings hold (lock taken here): how many messages. Garbage in a
 * ring breaks the graph, as a socket that closed. */
static int drain_rings(struct ferry_graph *g)
{
	int n = 0;

	pthread_mutex_lock(&g->lock);
	for (uint32_t i = 0; i < g->nworkers; i++) {
		struct gworker *w = &g->workers[i];
		struct reader rd = {g, i};
		int ret;

		if (w->dead || !ferry__rt_fdring_pending(w->ring))
			continue;
		ret = ferry__rt_fdring_drain(w->ring, ring_deliver, &rd);
		if (ret < 0)
			break_graph(g, i, "wrote garbage into its ring");
		else
			n += ret;
	}
	pthread_mutex_unlock(&g->lock);
	return n;
}

static bool rings_pending(const struct ferry_graph *g, bool any_ring)
{
	for (uint32_t i = 0; i < g->nworkers; i++)
		if (!g->workers[i].dead && g->workers[i].ring &&
		    (any_ring || ferry__rt_fdring_pending(g->workers[i].ring)))
			return true;
	return false;
}

/*
 * Poll the rings for up to g->spin_us, the sockets (@pfd, @n) every SOCKET_LOOK_NS meanwhile:
 * a result on its way comes in a few us, and a sleep would add a wake-up to it (ring.h's
 * FERRY_RING_SPIN_US, as the loops). Each pass yields, as a loop's spin does: on a crowded
 * host the workers that make the result need the CPU. Whether something came.
 */
#define SOCKET_LOOK_NS 8000u
static bool spin(struct ferry_graph *g, struct pollfd *pfd, uint32_t n)
{
	uint64_t start = ferry__now_ns(), now = start, looked = start;
	bool found = false;

	if (!g->spin_us || !rings_pending(g, true) || !ferry__spin_waiter_enter())
		return false;
	while (!found && now - start < g->spin_us * 1000ull) {
		if (rings_pending(g, false)) {
			found = true;
		} else if (now - looked >= SOCKET_LOOK_NS) {
			looked = now;
			found = poll(pfd, n, 0) > 0;
		} else {
			sched_yield();
		}
		now = ferry__now_ns();
	}
	ferry__spin_leave();
	return found;
}

/* Before sleeping: the rings' wake-up fds into @pfd after @n entries (their workers into
 * @map), each ring's sleeping word set. The new count. */
static uint32_t ring_sleep(struct ferry_graph *g, struct pollfd *pfd, uint32_t *map, uint32_t n)
{
	for (uint32_t i = 0; i < g->nworkers; i++) {
		int fd = g->workers[i].dead ? -1 : ferry__rt_fdring_sleep(g->workers[i].ring, true);

		if (fd < 0)
			continue;
		pfd[n] = (struct pollfd){.fd = fd, .events = POLLIN};
		map[n++] = i;
	}
	return n;
}

/*
 * Take what came within @timeout_ms: the rings, then every open socket (spinning on the
 * rings first, then asleep in poll). Only the reader (or compile and destroy, alone with the
 * graph) calls it. A socket that closed breaks the graph.
 */
static void pump(struct ferry_graph *g, int timeout_ms)
{
	struct pollfd pfd[2 * FERRY_GRAPH_MAX_NODES];
	uint32_t map[2 * FERRY_GRAPH_MAX_NODES], n = 0, nsock;
	int ret;

	if (drain_rings(g) > 0)
		return;
	for (uint32_t i = 0; i < g->nworkers; i++) {
		if (g->workers[i].fd < 0 || g->workers[i].dead)
			continue;
		pfd[n] = (struct pollfd){.fd = g->workers[i].fd, .events = POLLIN};
		map[n++] = i;
	}
	if (!n) {
		if (timeout_ms > 0)
			usleep((useconds_t)FERRY_MIN(timeout_ms, 10) * 1000u);
		return;
	}
	nsock = n;
	if (spin(g, pfd, n)) {
		timeout_ms = 0;
	} else {
		n = ring_sleep(g, pfd, map, n);
		if (rings_pending(g, false)) /* once more, now that the workers see us asleep */
			timeout_ms = 0;
	}
	ret = poll(pfd, n, timeout_ms);
	for (uint32_t k = nsock; k < n; k++) {
		(void)ferry__rt_fdring_sleep(g->workers[map[k]].ring, false);
		if (ret > 0 && pfd[k].revents)
			ferry__rt_fdring_woken(g->workers[map[k]].ring);
	}
	(void)drain_rings(g);
	for (uint32_t k = 0; ret > 0 && k < nsock; k++) {
		char how[96];
		int err;

		if (!pfd[k].revents)
			continue;
		err = read_worker(g, map[k]);
		if (err == 0)
			continue;
		snprintf(how, sizeof(how), "closed the graph's socket (%s)", ferry_strerror(err));
		pthread_mutex_lock(&g->lock);
		break_graph(g, map[k], how);
		pthread_mutex_unlock(&g->lock);
	}
}

static int64_t remaining_ms(uint64_t deadline)
{
	uint64_t now = ferry__loop_now_ms();

	return deadline == UINT64_MAX ? -1 : now >= deadline ? 0 : (int64_t)(deadline - now);
}

/* ---- compile ---- */

struct snapshot {
	struct ferry__rt_actor *a;     /* in */
	uint8_t state;		       /* out */
	struct ferry_worker_id worker; /* out */
	struct ferry_node_id node;     /* out */
	struct ferry_actor_id id;      /* out */
	char why[320];		       /* out: DEAD's reason */
	char rt_path[108];	       /* out: its node's runtime socket, "" ours */
};

static int take_snapshot(void *arg)
{
	struct snapshot *s = arg;
	struct ferry__rt_endpoint ep;

	s->state = s->a->state;
	s->worker = s->a->worker;
	s->node = s->a->node;
	s->id = s->a->id;
	snprintf(s->why, sizeof(s->why), "%s", s->a->why);
	/* An actor placed on another node of this host: its worker's socket is beside that
	 * node's (another host's path is not found: graphs are local). */
	if (s->a->lease_node && ferry__rt_nodes_endpoint(s->a->lease_node, &ep) == 0)
		snprintf(s->rt_path, sizeof(s->rt_path), "%s", ep.path);
	return 0;
}

/* The actor's worker, once it is ALIVE (it may be PENDING still, or RESTARTING). */
static int actor_worker(struct gworker *w, uint64_t deadline)
{
	struct snapshot s = {.a = w->a};
	char rt_path[sizeof(ferry__rt.store_socket) + 4];
	int ret;

	for (;;) {
		ret = ferry__loop_call(ferry__rt.loop, take_snapshot, &s);
		if (ret < 0)
			return ret;
		if (s.state == FERRY_GCS_ACTOR_DEAD) {
			FLOG_ERROR(COMP, "graph: actor %s is dead: %s", w->a->cls, s.why);
			return -ESRCH;
		}
		if (s.state == FERRY_GCS_ACTOR_ALIVE && !ferry_id_is_nil(s.worker.bytes, 16))
			break;
		if (remaining_ms(deadline) == 0)
			return -ETIMEDOUT;
		usleep(ALIVE_POLL_MS * 1000);
	}
	w->id = s.worker;
	w->node = s.node;
	w->actor = s.id;
	if (s.rt_path[0])
		return ferry__worker_listen_path(s.rt_path, &w->id, w->path, sizeof(w->path));
	snprintf(rt_path, sizeof(rt_path), "%s.rt", ferry__rt.store_socket);
	return ferry__worker_listen_path(rt_path, &w->id, w->path, sizeof(w->path));
}

/* One worker per distinct actor; each node's worker index. */
static int group_workers(struct ferry_graph *g)
{
	g->workers = ferry__calloc(g->nnodes, sizeof(*g->workers));
	if (!g->workers)
		return -ENOMEM;
	for (uint32_t i = 0; i < g->nnodes; i++) {
		struct ferry__rt_actor *a = g->nodes[i].actor->a;
		uint32_t k = 0;

		while (k < g->nworkers && g->workers[k].a != a)
			k++;
		if (k == g->nworkers) {
			g->workers[k].a = a;
			g->workers[k].fd = -1;
			g->workers[k].install_status = 1;
			ferry__frame_parser_init(&g->workers[k].parser, FRAME_MAX);
			g->nworkers++;
		}
		g->nodes[i].worker = k;
	}
	return 0;
}

/* The edges of node @j: every later node's argument that takes its result, and the driver
 * for the output. @edges has room for them all. */
static size_t node_edges(const struct ferry_graph *g, uint32_t j, struct ferry__wire_graph_edge *e)
{
	size_t n = 0;

	for (uint32_t k = j + 1; k < g->nnodes; k++)
		for (uint32_t i = 0; i < g->nodes[k].nargs; i++) {
			const struct ferry_graph_arg *a = &g->nodes[k].args[i];

			if (a->kind != FERRY_GRAPH_ARG_NODE || a->index != j)
				continue;
			e[n] = (struct ferry__wire_graph_edge){.node = k, .arg = i};
			if (g->nodes[k].worker != g->nodes[j].worker)
				e[n].worker_path = g->workers[g->nodes[k].worker].path;
			n++;
		}
	if (j == g->nnodes - 1)
		e[n++] = (struct ferry__wire_graph_edge){.node = j, .to_driver = true};
	return n;
}

/* Build and send worker @wi's GraphInstall (send_lock held). */
static int send_install(struct ferry_graph *g, uint32_t wi)
{
	struct gworker *w = &g->workers[wi];
	struct ferry__wire_graph_install m = {.graph_id = g->id, .num_nodes = g->nnodes};
	struct ferry__wire_graph_node *nodes = ferry__calloc(g->nnodes, sizeof(*nodes));
	struct ferry__wire_graph_arg *args =
		ferry__calloc((size_t)g->nnodes * FERRY_GRAPH_MAX_ARGS, sizeof(*args));
	struct ferry__wire_graph_edge *edges =
		ferry__calloc((size_t)g->nnodes * FERRY_GRAPH_MAX_ARGS + g->nnodes, sizeof(*edges));
	size_t nn = 0, na = 0, ne = 0;
	int ret = -ENOMEM;

	if (!nodes || !args || !edges)
		goto out;
	memcpy(m.actor_id.bytes, w->actor.bytes, sizeof(m.actor_id.bytes));
	for (uint32_t j = 0; j < g->nnodes; j++) {
		const struct gnode *n = &g->nodes[j];

		if (n->worker != wi)
			continue;
		nodes[nn] = (struct ferry__wire_graph_node){
			.index = j, .method = n->method, .args = &args[na], .args_count = n->nargs};
		for (uint32_t i = 0; i < n->nargs; i++)
			args[na++] = (struct ferry__wire_graph_arg){
				.kind = (uint8_t)n->args[i].kind,
				.index = n->args[i].index,
				.data = n->args[i].kind == FERRY_GRAPH_ARG_CONST ? n->args[i].data
										 : NULL,
				.data_count = n->args[i].kind == FERRY_GRAPH_ARG_CONST
						      ? n->args[i].len
						      : 0};
		nodes[nn].edges = &edges[ne];
		nodes[nn].edges_count = node_edges(g, j, &edges[ne]);
		ne += nodes[nn].edges_count;
		nn++;
	}
	m.nodes = nodes;
	m.nodes_count = nn;
	ret = ferry__wire_graph_install_build(&g->fb, &m);
	if (ret == 0)
		ret = send_frame(g, w, FERRY__WIRE_MSG_GRAPH_INSTALL);
out:
	ferry__free(nodes);
	ferry__free(args);
	ferry__free(edges);
	return ret;
}

static bool all_installed(const struct ferry_graph *g)
{
	for (uint32_t i = 0; i < g->nworkers; i++)
		if (g->workers[i].install_status == 1 && !g->workers[i].dead)
			return false;
	return true;
}

/* Send every GraphInstall and wait for the answers. */
static int install(struct ferry_graph *g, uint64_t deadline)
{
	int ret = 0;

	pthread_mutex_lock(&g->send_lock);
	for (uint32_t i = 0; ret == 0 && i < g->nworkers; i++) {
		ret = worker_connect(g, &g->workers[i]);
		if (ret == 0)
			ret = send_install(g, i);
		if (ret < 0)
			FLOG_ERROR(COMP, "graph: cannot install it on worker %s (actor %s): %s",
				   g->workers[i].path, g->workers[i].a->cls, ferry_strerror(ret));
	}
	pthread_mutex_unlock(&g->send_lock);
	while (ret == 0 && !all_installed(g)) {
		int64_t left = remaining_ms(deadline);

		if (left == 0)
			return -ETIMEDOUT;
		pump(g, left < 0 || left > 100 ? 100 : (int)left);
	}
	for (uint32_t i = 0; ret == 0 && i < g->nworkers; i++) {
		struct gworker *w = &g->workers[i];

		if (w->dead || w->install_status == 1) {
			FLOG_ERROR(COMP, "graph: worker %s (actor %s) closed before installing it",
				   w->path, w->a->cls);
			ret = -EPIPE;
		} else if (w->install_status < 0) {
			FLOG_ERROR(COMP, "graph: worker %s (actor %s) refused it: %s", w->path,
				   w->a->cls, w->install_why);
			ret = w->install_status;
		}
		g->max_graphs = FERRY_MAX(g->max_graphs, (int)w->graphs);
	}
	return ret;
}

int ferry_graph_compile(struct ferry_graph *g, int64_t timeout_ms)
{
	uint64_t deadline =
		timeout_ms < 0 ? UINT64_MAX : ferry__loop_now_ms() + (uint64_t)timeout_ms;
	int ret = 0;

	if (!g)
		return -EINVAL;
	if (!ferry__rt.up)
		return -ENOTCONN;
	if (g->compiled || g->failed || !g->nnodes) {
		FLOG_ERROR(COMP, "graph compile: %s",
			   g->nnodes ? "compiled already" : "no node bound");
		return -EINVAL;
	}
	for (uint32_t i = 0; i + 1 < g->nnodes; i++)
		if (!g->nodes[i].used) {
			FLOG_ERROR(COMP,
				   "graph compile: node %" PRIu32
				   " (%s): no node takes its result, "
				   "and only the last node is the output",
				   i, g->nodes[i].method);
			return -EINVAL;
		}
	ret = group_workers(g);
	for (uint32_t i = 0; ret == 0 && i < g->nworkers; i++)
		ret = actor_worker(&g->workers[i], deadline);
	if (ret == 0)
		ret = install(g, deadline);
	if (ret < 0) {
		FLOG_ERROR(COMP, "graph compile failed: %s", ferry_strerror(ret));
		for (uint32_t i = 0; i < g->nworkers; i++)
			worker_close(&g->workers[i]); /* the workers drop what they installed */
		g->failed = true;
		return ret;
	}
	pthread_mutex_lock(&g->lock);
	g->compiled = true;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

int ferry_graph_worker_graphs(const struct ferry_graph *g)
{
	return g && g->compiled ? g->max_graphs : -EINVAL;
}

/* ---- execute and get ---- */

/* Send execution @seq's inputs (send_lock held); the worker that refused one into *@bad. */
static int send_inputs(struct ferry_graph *g, uint64_t seq, const struct ferry_graph_arg *inputs,
		       uint32_t *bad)
{
	for (uint32_t j = 0; j < g->nnodes; j++) {
		const struct gnode *n = &g->nodes[j];

		for (uint32_t i = 0; i < n->nargs; i++) {
			struct ferry__wire_graph_data m = {
				.graph_id = g->id, .seq = seq, .node = j, .arg = i};
			int ret;

			if (n->args[i].kind != FERRY_GRAPH_ARG_INPUT)
				continue; /* only an input's index is an input's */
			m.data = inputs[n->args[i].index].data;
			m.data_count = inputs[n->args[i].index].len;
			ret = ferry__wire_graph_data_build(&g->fb, &m);
			if (ret == 0)
				ret = send_frame(g, &g->workers[n->worker],
						 FERRY__WIRE_MSG_GRAPH_DATA);
			if (ret < 0) {
				*bad = n->worker;
				return ret;
			}
		}
	}
	return 0;
}

int ferry_graph_execute(struct ferry_graph *g, const struct ferry_graph_arg *inputs, size_t ninputs,
			uint64_t *exec)
{
	struct gslot *s;
	uint32_t bad = 0;
	uint64_t seq;
	int ret;

	if (!g || !exec || (ninputs && !inputs))
		return -EINVAL;
	pthread_mutex_lock(&g->send_lock);
	pthread_mutex_lock(&g->lock);
	ret = !g->compiled || ninputs != g->ninputs ? -EINVAL : 0;
	for (size_t i = 0; ret == 0 && i < ninputs; i++)
		if (inputs[i].kind != FERRY_GRAPH_ARG_CONST || (inputs[i].len && !inputs[i].data))
			ret = -EINVAL;
		else if (inputs[i].len > FRAME_MAX / 2)
			ret = -EMSGSIZE; /* values travel inline, in one frame */
	if (ret < 0)
		goto out;
	s = &g->slots[g->next_seq % WINDOW];
	if (s->state != SLOT_FREE) {
		ret = -EAGAIN;
		goto out;
	}
	seq = g->next_seq++;
	*s = (struct gslot){.seq = seq, .state = SLOT_WAITING};
	*exec = seq;
	ret = 0;
	if (g->broken) {
		slot_done(s, g->broken, g->broken_why, strlen(g->broken_why));
		goto out;
	}
	pthread_mutex_unlock(&g->lock);
	/* Sends may block on a full socket: the slots stay free for the reader meanwhile. */
	ret = send_inputs(g, seq, inputs, &bad);
	pthread_mutex_lock(&g->lock);
	if (ret < 0 && s->state == SLOT_WAITING) {
		char how[96];

		/* The execution cannot complete: part of it may have gone out, so its seq is
		 * spent. A socket that refused a write is a worker gone: the graph is broken. */
		snprintf(how, sizeof(how), "refused the execution's input (%s)",
			 ferry_strerror(ret));
		if (ret != -ENOMEM && ret != -EMSGSIZE)
			break_graph(g, bad, how);
		else
			slot_done(s, ret, how, strlen(how));
		ret = 0;
	}
out:
	pthread_mutex_unlock(&g->lock);
	pthread_mutex_unlock(&g->send_lock);
	return ret;
}

/* Give slot @s's result to @out (lock held). */
static int take(struct gslot *s, struct ferry_graph_result *out)
{
	int status = s->status;

	out->data = s->data;
	out->len = s->len;
	snprintf(out->error, sizeof(out->error), "%s", s->message ? s->message : "");
	ferry__free(s->message);
	*s = (struct gslot){0};
	return status;
}

int ferry_graph_get(struct ferry_graph *g, uint64_t exec, int64_t timeout_ms,
		    struct ferry_graph_result *out)
{
	uint64_t deadline =
		timeout_ms < 0 ? UINT64_MAX : ferry__loop_now_ms() + (uint64_t)timeout_ms;
	struct gslot *s;
	int ret;

	if (!g || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&g->lock);
	s = &g->slots[exec % WINDOW];
	for (;;) {
		int64_t left;

		if (!g->compiled || s->seq != exec || s->state == SLOT_FREE) {
			ret = -ENOENT;
			break;
		}
		if (s->state == SLOT_DONE) {
			ret = take(s, out);
			break;
		}
		left = remaining_ms(deadline);
		if (left == 0) {
			ret = -ETIMEDOUT;
			break;
		}
		if (g->reading) {
			struct timespec ts = ferry__deadline_in_us(
				(uint64_t)(left < 0 || left > 100 ? 100 : left) * 1000u);

			pthread_cond_timedwait(&g->cond, &g->lock, &ts);
			continue;
		}
		g->reading = true;
		pthread_mutex_unlock(&g->lock);
		pump(g, left < 0 || left > 1000 ? 1000 : (int)left);
		pthread_mutex_lock(&g->lock);
		g->reading = false;
		pthread_cond_broadcast(&g->cond);
	}
	pthread_mutex_unlock(&g->lock);
	return ret;
}

void ferry_graph_result_release(struct ferry_graph_result *r)
{
	if (!r)
		return;
	ferry__free(r->data);
	r->data = NULL;
	r->len = 0;
}

/* ---- destroy ---- */

static bool all_destroyed(const struct ferry_graph *g)
{
	for (uint32_t i = 0; i < g->nworkers; i++)
		if (g->workers[i].fd >= 0 && !g->workers[i].dead && !g->workers[i].destroyed)
			return false;
	return true;
}

void ferry_graph_destroy(struct ferry_graph *g)
{
	struct ferry__wire_graph_destroy m;
	uint64_t deadline;

	if (!g)
		return;
	m = (struct ferry__wire_graph_destroy){.graph_id = g->id};
	pthread_mutex_lock(&g->send_lock);
	for (uint32_t i = 0; g->compiled && i < g->nworkers; i++)
		if (g->workers[i].fd >= 0 &&
		    (ferry__wire_graph_destroy_build(&g->fb, &m) < 0 ||
		     send_frame(g, &g->workers[i], FERRY__WIRE_MSG_GRAPH_DESTROY) < 0))
			worker_close(&g->workers[i]); /* closing frees it there too */
	pthread_mutex_unlock(&g->send_lock);
	/* Wait for the workers to confirm, so that a graph compiled next finds them clean. */
	deadline = ferry__loop_now_ms() + DESTROY_WAIT_MS;
	while (g->compiled && !all_destroyed(g) && remaining_ms(deadline) > 0)
		pump(g, 100);
	for (uint32_t i = 0; i < g->nworkers; i++) {
		worker_close(&g->workers[i]);
		ferry__frame_parser_fini(&g->workers[i].parser);
	}
	for (uint32_t k = 0; k < WINDOW; k++) {
		ferry__free(g->slots[k].data);
		ferry__free(g->slots[k].message);
	}
	for (uint32_t i = 0; i < g->nnodes; i++)
		node_free(&g->nodes[i]);
	ferry__free(g->nodes);
	ferry__free(g->workers);
	ferry__fb_builder_fini(&g->fb);
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->send_lock);
	pthread_mutex_destroy(&g->lock);
	ferry__free(g);
}
