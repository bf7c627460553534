/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched-sim: the scheduler's policy (sched/policy.h) in a discrete-event simulation of a
 * cluster of up to tens of thousands of nodes, to measure what cannot be run for real here:
 * decisions per second against the number of nodes, how long a burst takes to fill a cluster,
 * and how many tasks run where their input is.
 *
 * DESIGN: one thread, simulated time in ns, a binary heap of events. Each node has slots, a
 * FIFO queue and a local rule (run here when a slot is free, the queue is empty and no other
 * node holds clearly more of the task's input; else forward up). Above the nodes: optional
 * group levels of @fanout nodes, then one global level, each a sched/policy.c level whose
 * children report their load every --report-ms (a node's report to its group, a group's summary
 * to the global), arriving one hop later. A level is a server: it takes one task at a time, and
 * each decision costs the wall time the real policy code took to make it (measured as it runs),
 * so a level's throughput in the simulation is the code's. A task travels up at most to the
 * global level and then down; a level that got a task from above places it below itself, so no
 * task ping-pongs. Every hop costs --hop-us.
 *
 * A task that runs away from its input first fetches it at --gbps, holding its slot meanwhile
 * (a fetch before dispatch would free the slot sooner; at light load, where the latency figures
 * are read, the difference is nil). --no-locality hides the inputs from the policy and the
 * local rule: a scheduler blind to data, the baseline of the latency-vs-input-size figure.
 *
 * Output: one line `SIM key=value ...` per run (bench/compare sched reads it).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/version.h"

#include "sched/policy.h"

#define SLOT(n) ((int64_t)(n)*FERRY__SCHED_UNIT)

enum ev_kind {
	EV_SUBMIT,   /* a = task: its submitter's node gets it */
	EV_UP,	     /* a = task, b = level index: it arrives at a level from below */
	EV_DOWN,     /* a = task, b = level index (or -1 - node): placed from above */
	EV_FINISH,   /* a = task ends on its node */
	EV_REPORT,   /* every level takes its children's reports (one hop old) */
	EV_LEVEL_OK, /* b = level: it is free to take its next task */
};

struct event {
	uint64_t t_ns; /* when */
	uint64_t seq;  /* ties in order of scheduling */
	enum ev_kind kind;
	int64_t a, b;
};

struct task {
	uint32_t submit_node; /* where it was submitted */
	uint32_t input_node;  /* where its input lies, or UINT32_MAX */
	uint64_t input_bytes; /* the input's size */
	uint64_t dur_ns;      /* how long it runs */
	uint64_t submit_ns;   /* when it was submitted */
	uint32_t ran_on;      /* the node it ran on */
	uint32_t hops;	      /* levels it passed */
	bool input_free;      /* its input's node had a free slot when it was submitted */
};

struct node {
	uint32_t busy;	 /* slots running */
	uint32_t *queue; /* tasks waiting, FIFO ring */
	uint32_t qhead, qlen, qcap;
	uint64_t done;	 /* tasks finished, for the mean task time */
	uint64_t ran_ns; /* their total run time */
	uint32_t group;	 /* the level above it */
	uint32_t child;	 /* its child number there */
};

struct level {
	struct ferry__sched_level *pol; /* the real policy */
	int parent;			/* the level above, or -1 (global) */
	uint32_t child_in_parent;	/* its child number there */
	uint32_t *queue;		/* tasks waiting for this level (FIFO ring) */
	uint32_t qhead, qlen, qcap;
	bool busy;	  /* deciding */
	int nkids;	  /* children */
	int32_t *kid;	  /* child -> node (>= 0) or -1 - level */
	uint64_t version; /* of its summaries */
};

struct sim {
	/* parameters */
	uint32_t nodes, slots, fanout;
	uint64_t hop_ns, report_ns;
	double bytes_per_ns; /* the network's bandwidth between two nodes */
	bool no_locality;    /* the policy and the local rule do not see the inputs */
	/* state */
	struct node *node;
	struct level *level;
	int nlevels;
	struct task *task;
	uint32_t ntasks, finished;
	struct event *heap;
	size_t nheap, capheap;
	uint64_t seq, now;
	/* measurements */
	uint64_t decisions, decide_wall_ns, busy_slots, busy_95_ns, placed_local, with_input;
	uint64_t max_hops, report_version;
	uint64_t hops_sum; /* over the tasks run: levels passed */
	double *decide_samples;
	size_t nsamples, capsamples;
	uint64_t lat_sum_ns, fetched; /* submit to finish, summed; tasks that fetched input */
	double *lat_samples;	      /* one per finished task, in ms */
};

static uint64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);

	if (!q) {
		fprintf(stderr, "ferry-sched-sim: out of memory\n");
		exit(1);
	}
	return q;
}

static bool ev_before(const struct event *x, const struct event *y)
{
	return x->t_ns < y->t_ns || (x->t_ns == y->t_ns && x->seq < y->seq);
}

static void push(struct sim *s, uint64_t t, enum ev_kind k, int64_t a, int64_t b)
{
	if (s->nheap == s->capheap) {
		s->capheap = s->capheap ? s->capheap * 2 : 1024;
		s->heap = xrealloc(s->heap, s->capheap * sizeof(*s->heap));
	}
	size_t i = s->nheap++;
	struct event e = {t, s->seq++, k, a, b};
	while (i > 0 && ev_before(&e, &s->heap[(i - 1) / 2])) {
		s->heap[i] = s->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	s->heap[i] = e;
}

static struct event pop(struct sim *s)
{
	struct event top = s->heap[0], last = s->heap[--s->nheap];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= s->nheap)
			break;
		if (c + 1 < s->nheap && ev_before(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!ev_before(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (s->nheap)
		s->heap[i] = last;
	return top;
}

static void ring_push(uint32_t **q, uint32_t *head, uint32_t *len, uint32_t *cap, uint32_t v)
{
	if (*len == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 16;
		uint32_t *n = xrealloc(NULL, ncap * sizeof(*n));
		for (uint32_t i = 0; i < *len; i++)
			n[i] = (*q)[(*head + i) % *cap];
		free(*q);
		*q = n;
		*head = 0;
		*cap = ncap;
	}
	(*q)[(*head + *len) % *cap] = v;
	(*len)++;
}

static uint32_t ring_pop(uint32_t *q, uint32_t *head, uint32_t *len, uint32_t cap)
{
	uint32_t v = q[*head];

	*head = (*head + 1) % cap;
	(*len)--;
	return v;
}

static void run_task(struct sim *s, uint32_t n, uint32_t t)
{
	struct task *tk = &s->task[t];

	uint64_t fetch_ns = 0;

	s->node[n].busy++;
	s->busy_slots++;
	tk->ran_on = n;
	if (tk->input_node != UINT32_MAX && tk->input_node != n && tk->input_bytes) {
		fetch_ns = (uint64_t)((double)tk->input_bytes / s->bytes_per_ns);
		s->fetched++;
	}
	if (tk->input_node != UINT32_MAX && tk->input_free) {
		s->with_input++;
		s->placed_local += tk->input_node == n;
	}
	if (tk->hops > s->max_hops)
		s->max_hops = tk->hops;
	s->hops_sum += tk->hops;
	if (!s->busy_95_ns && s->busy_slots * 100 >= (uint64_t)s->nodes * s->slots * 95)
		s->busy_95_ns = s->now;
	push(s, s->now + fetch_ns + tk->dur_ns, EV_FINISH, t, 0);
}

/* A node takes a task placed on it from above: it runs now or waits in its queue. */
static void node_take(struct sim *s, uint32_t n, uint32_t t)
{
	struct node *nd = &s->node[n];

	if (nd->busy < s->slots && !nd->qlen)
		run_task(s, n, t);
	else
		ring_push(&nd->queue, &nd->qhead, &nd->qlen, &nd->qcap, t);
}

/* The local rule: run here when a slot is free and the input is not clearly elsewhere. */
static bool local_accepts(const struct sim *s, uint32_t n, const struct task *tk)
{
	const struct node *nd = &s->node[n];

	if (nd->busy >= s->slots || nd->qlen)
		return false;
	if (s->no_locality)
		return true;
	/* Another node holds the input, and it is large enough to matter (over 1 MiB). */
	return tk->input_node == UINT32_MAX || tk->input_node == n ||
	       tk->input_bytes < FERRY__SCHED_LOCALITY_MIN_BYTES;
}

static void level_next(struct sim *s, int li);

static void level_enqueue(struct sim *s, int li, uint32_t t, bool from_above)
{
	struct level *lv = &s->level[li];

	/* The top bit says "from above": such a task is placed below, never sent up again. */
	ring_push(&lv->queue, &lv->qhead, &lv->qlen, &lv->qcap, t | (from_above ? 1u << 31 : 0));
	if (!lv->busy)
		level_next(s, li);
}

static void level_decide(struct sim *s, int li, uint32_t t, bool from_above)
{
	struct level *lv = &s->level[li];
	struct task *tk = &s->task[t];
	struct ferry__sched_input in = {.size_bytes = tk->input_bytes,
					.nlocations =
						tk->input_node != UINT32_MAX && !s->no_locality,
					.locations = &tk->input_node};
	struct ferry__sched_task st = {.ndemand = 1, .ninputs = in.nlocations, .inputs = &in};
	struct ferry__sched_decision d;
	uint64_t w0, w1;
	int ret;

	st.demand[0].kind = FERRY__SCHED_CPU;
	st.demand[0].amount = SLOT(1);
	/* At the global level a task from below came up from its submitter's group: never back
	 * down to it (as ferry-sched's tree does), unless no other group could ever take it, where
	 * that group keeps it (the group's own choice, ferry-sched's fallback). */
	if (lv->parent < 0 && !from_above && s->fanout) {
		st.exclude = true;
		st.excluded_child = s->level[s->node[tk->submit_node].group].child_in_parent;
	}
	w0 = wall_ns();
	ret = ferry__sched_decide(lv->pol, &st, &d);
	if (ret == -ENOSPC && st.exclude) {
		ret = 0;
		d.child = st.excluded_child;
		d.verdict = FERRY__SCHED_QUEUES;
	}
	if (ret == 0)
		ferry__sched_commit(lv->pol, &st, &d);
	w1 = wall_ns();
	s->decisions++;
	s->decide_wall_ns += w1 - w0;
	if (s->nsamples < s->capsamples)
		s->decide_samples[s->nsamples++] = (double)(w1 - w0);
	tk->hops++;
	lv->busy = true;
	push(s, s->now + (w1 - w0), EV_LEVEL_OK, 0, li);
	if (ret < 0) {
		fprintf(stderr, "ferry-sched-sim: level %d cannot place task %u: %s\n", li, t,
			strerror(-ret));
		exit(1);
	}
	/* Up when the policy says so and the task did not come from above; else down. */
	if (!from_above && lv->parent >= 0 && ferry__sched_forward_up(&d)) {
		push(s, s->now + (w1 - w0) + s->hop_ns, EV_UP, t, lv->parent);
		return;
	}
	push(s, s->now + (w1 - w0) + s->hop_ns, EV_DOWN, t, lv->kid[d.child]);
}

static void level_next(struct sim *s, int li)
{
	struct level *lv = &s->level[li];

	lv->busy = false;
	if (!lv->qlen)
		return;
	uint32_t v = ring_pop(lv->queue, &lv->qhead, &lv->qlen, lv->qcap);
	level_decide(s, li, v & ~(1u << 31), v >> 31);
}

static void on_finish(struct sim *s, uint32_t t)
{
	uint32_t n = s->task[t].ran_on;
	struct node *nd = &s->node[n];

	nd->busy--;
	s->busy_slots--;
	nd->done++;
	nd->ran_ns += s->task[t].dur_ns;
	s->lat_sum_ns += s->now - s->task[t].submit_ns;
	s->lat_samples[s->finished] = (double)(s->now - s->task[t].submit_ns) / 1e6;
	s->finished++;
	if (nd->qlen)
		run_task(s, n, ring_pop(nd->queue, &nd->qhead, &nd->qlen, nd->qcap));
}

/* Every level takes its children's load (what they had one hop ago: close enough here). */
static void on_report(struct sim *s)
{
	s->report_version++;
	for (int li = s->nlevels - 1; li >= 0; li--) {
		struct level *lv = &s->level[li];
		for (int c = 0; c < lv->nkids; c++) {
			struct ferry__sched_load load;
			if (lv->kid[c] >= 0) {
				const struct node *nd = &s->node[lv->kid[c]];
				memset(&load, 0, sizeof(load));
				load.version = s->report_version;
				load.total[0] = load.total_max[0] = SLOT(s->slots);
				load.avail[0] = load.avail_max[0] = SLOT(s->slots - nd->busy);
				load.queue_len = nd->qlen;
				load.mean_task_ns = nd->done ? nd->ran_ns / nd->done : 0;
			} else {
				struct level *below = &s->level[-1 - lv->kid[c]];
				ferry__sched_level_summary(below->pol, s->report_version, &load);
				load.queue_len += below->qlen;
			}
			if (ferry__sched_child_report(lv->pol, (uint32_t)c, &load) < 0)
				exit(1);
		}
	}
	if (s->finished < s->ntasks)
		push(s, s->now + s->report_ns, EV_REPORT, 0, 0);
}

static int add_level(struct sim *s, int parent)
{
	struct level *lv;
	struct ferry__sched_level_opts o = {0};

	s->level = xrealloc(s->level, (size_t)(s->nlevels + 1) * sizeof(*s->level));
	lv = &s->level[s->nlevels];
	memset(lv, 0, sizeof(*lv));
	if (ferry__sched_level_create(&o, &lv->pol) < 0)
		exit(1);
	lv->parent = parent;
	return s->nlevels++;
}

static uint32_t add_kid(struct sim *s, int li, int32_t kid)
{
	struct level *lv = &s->level[li];
	uint32_t c;

	if (ferry__sched_child_add(lv->pol, &c) < 0)
		exit(1);
	lv->kid = xrealloc(lv->kid, (size_t)(lv->nkids + 1) * sizeof(*lv->kid));
	lv->kid[lv->nkids++] = kid;
	return c;
}

/* The tree: a global level over groups of @fanout nodes (or over the nodes, fanout 0). */
static void build(struct sim *s)
{
	int global = add_level(s, -1);

	s->node = calloc(s->nodes, sizeof(*s->node));
	if (!s->node)
		exit(1);
	for (uint32_t n = 0; n < s->nodes; n++) {
		int li = global;
		if (s->fanout && n % s->fanout == 0) {
			int g = add_level(s, global);
			s->level[g].child_in_parent = add_kid(s, global, -1 - g);
		}
		if (s->fanout)
			li = s->nlevels - 1;
		s->node[n].group = (uint32_t)li;
		s->node[n].child = add_kid(s, li, (int32_t)n);
		ferry__sched_level_map_node(s->level[li].pol, n, s->node[n].child);
		if (li != global)
			ferry__sched_level_map_node(s->level[global].pol, n,
						    s->level[li].child_in_parent);
	}
}

static void dispatch(struct sim *s, struct event e)
{
	uint32_t t = (uint32_t)e.a;

	switch (e.kind) {
	case EV_SUBMIT:
		s->task[t].submit_ns = s->now;
		if (s->task[t].input_node != UINT32_MAX)
			s->task[t].input_free = s->node[s->task[t].input_node].busy < s->slots;
		if (local_accepts(s, s->task[t].submit_node, &s->task[t]))
			run_task(s, s->task[t].submit_node, t);
		else
			push(s, s->now + s->hop_ns, EV_UP, t,
			     s->node[s->task[t].submit_node].group);
		break;
	case EV_UP:
		level_enqueue(s, (int)e.b, t, false);
		break;
	case EV_DOWN:
		if (e.b >= 0)
			node_take(s, (uint32_t)e.b, t);
		else
			level_enqueue(s, (int)(-1 - e.b), t, true);
		break;
	case EV_FINISH:
		on_finish(s, t);
		break;
	case EV_REPORT:
		on_report(s);
		break;
	case EV_LEVEL_OK:
		level_next(s, (int)e.b);
		break;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/*
 * --decide-only: the policy alone, as a busy scheduler level runs it: @nodes children of
 * @slots slots with random load, tasks with one input on a random node, each decided and
 * committed, and a fresh report from one random child every 10 decisions (a level of 10,000
 * nodes reporting every 100 ms takes 100,000 reports/s). Prints decisions per second.
 */
static int decide_only(uint32_t nodes, uint32_t slots, uint32_t ntasks)
{
	struct ferry__sched_level *l;
	struct ferry__sched_load load;
	uint64_t version = 1, w0, w1;
	uint32_t placed_local = 0;

	if (ferry__sched_level_create(NULL, &l) < 0)
		return 1;
	memset(&load, 0, sizeof(load));
	for (uint32_t n = 0; n < nodes; n++) {
		uint32_t c;
		if (ferry__sched_child_add(l, &c) < 0 || ferry__sched_level_map_node(l, n, c) < 0)
			return 1;
	}
	load.total[0] = load.total_max[0] = SLOT(slots);
	load.mean_task_ns = 10000000;
	for (uint32_t n = 0; n < nodes; n++) {
		load.version = version++;
		load.avail[0] = load.avail_max[0] = SLOT(rnd() % (slots + 1));
		load.queue_len = (uint32_t)(rnd() % 3);
		if (ferry__sched_child_report(l, n, &load) < 0)
			return 1;
	}
	w0 = wall_ns();
	for (uint32_t i = 0; i < ntasks; i++) {
		uint32_t where = (uint32_t)(rnd() % nodes);
		struct ferry__sched_input in = {
			.size_bytes = 100u << 20, .nlocations = 1, .locations = &where};
		struct ferry__sched_task t = {.ndemand = 1, .ninputs = 1, .inputs = &in};
		struct ferry__sched_decision d;

		t.demand[0].kind = FERRY__SCHED_CPU;
		t.demand[0].amount = SLOT(1);
		if (ferry__sched_decide(l, &t, &d) < 0)
			return 1;
		ferry__sched_commit(l, &t, &d);
		placed_local += d.child == where;
		if (i % 10 == 0) {
			load.version = version++;
			load.avail[0] = load.avail_max[0] = SLOT(rnd() % (slots + 1));
			load.queue_len = (uint32_t)(rnd() % 3);
			ferry__sched_child_report(l, (uint32_t)(rnd() % nodes), &load);
		}
	}
	w1 = wall_ns();
	printf("SIM decide_only=1 nodes=%u slots=%u decisions=%u decisions_per_s=%.0f "
	       "local_fraction=%.4f\n",
	       nodes, slots, ntasks, (double)ntasks * 1e9 / (double)(w1 - w0),
	       (double)placed_local / ntasks);
	ferry__sched_level_destroy(l);
	return 0;
}

static void free_sim(struct sim *s)
{
	for (int i = 0; i < s->nlevels; i++) {
		ferry__sched_level_destroy(s->level[i].pol);
		free(s->level[i].kid);
		free(s->level[i].queue);
	}
	for (uint32_t n = 0; n < s->nodes; n++)
		free(s->node[n].queue);
	free(s->level);
	free(s->node);
	free(s->task);
	free(s->heap);
	free(s->decide_samples);
	free(s->lat_samples);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ferry-sched-sim [--nodes N] [--slots S] [--fanout F] [--tasks T] "
		   "[--decide-only]\n"
		   "         [--duration-ms D] [--input-bytes B] [--burst] [--hop-us H] "
		   "[--report-ms R]\n"
		   "         [--groups N] (N group levels under the global one: --fanout "
		   "nodes/N)\n"
		   "         [--gbps G] [--load-pct P] [--no-locality]\n"
		   "  --burst: every task is submitted at time 0 from node 0 (else: spread "
		   "over nodes\n"
		   "  and over --duration-ms x tasks / slots, each with an input on a random "
		   "node).\n"
		   "  --gbps: bandwidth between nodes for a task's input fetched from another "
		   "node (10);\n"
		   "  --load-pct: spread submissions keep this share of the slots busy (80; "
		   "decimals allowed);\n"
		   "  --no-locality: the scheduler does not see where inputs are.\n");
}

/*
 * A whole number in [@min, @max] for @flag into *@out; false (said why on stderr) for anything
 * else: a sign, trailing text, an empty value, out of range.
 */
static bool parse_num(const char *flag, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(v, &end, 10);
	if (!*v || *v == '-' || *v == '+' || *end || errno || x < min || x > max) {
		fprintf(stderr,
			"ferry-sched-sim: --%s: '%s' is not a whole number from %llu to %llu\n",
			flag, v, (unsigned long long)min, (unsigned long long)max);
		return false;
	}
	*out = x;
	return true;
}

/* A share in (0, 100] for @flag into *@out; false (said why on stderr) for anything else. */
static bool parse_pct(const char *flag, const char *v, double *out)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (!*v || *end || errno || !(x > 0 && x <= 100)) {
		fprintf(stderr, "ferry-sched-sim: --%s: '%s' is not a share above 0 up to 100\n",
			flag, v);
		return false;
	}
	*out = x;
	return true;
}

int main(int argc, char **argv)
{
	struct sim s = {.nodes = 1000,
			.slots = 8,
			.fanout = 0,
			.hop_ns = 100000,
			.report_ns = 100000000,
			.bytes_per_ns = 10.0 / 8};
	uint32_t ntasks = 100000, groups = 0;
	uint64_t dur_ns = 100000000, input_bytes = 100u << 20, v = 0;
	double load_pct = 80;
	bool burst = false, only = false, ok = true;
	static const struct option longopts[] = {{"nodes", 1, 0, 'n'},
						 {"slots", 1, 0, 's'},
						 {"fanout", 1, 0, 'f'},
						 {"tasks", 1, 0, 't'},
						 {"duration-ms", 1, 0, 'd'},
						 {"input-bytes", 1, 0, 'i'},
						 {"burst", 0, 0, 'b'},
						 {"hop-us", 1, 0, 'h'},
						 {"report-ms", 1, 0, 'r'},
						 {"decide-only", 0, 0, 'o'},
						 {"gbps", 1, 0, 'g'},
						 {"load-pct", 1, 0, 'l'},
						 {"no-locality", 0, 0, 'L'},
						 {"help", 0, 0, 'H'},
						 {"groups", 1, 0, 'G'},
						 {"version", 0, 0, 'V'},
						 {0, 0, 0, 0}};
	int opt, idx = 0;

	while (ok && (opt = getopt_long(argc, argv, "", longopts, &idx)) != -1) {
		const char *name = opt == '?' ? "" : longopts[idx].name;

		switch (opt) {
		case 'n': /* a level keeps ~0.2 KB per child, the sim ~0.1 KB per node */
			if ((ok = parse_num(name, optarg, 1, 100000, &v)))
				s.nodes = (uint32_t)v;
			break;
		case 's':
			if ((ok = parse_num(name, optarg, 1, 4096, &v)))
				s.slots = (uint32_t)v;
			break;
		case 'f':
			if ((ok = parse_num(name, optarg, 0, 10000000, &v)))
				s.fanout = (uint32_t)v;
			break;
		case 'G':
			if ((ok = parse_num(name, optarg, 1, 100000, &v)))
				groups = (uint32_t)v;
			break;
		case 't':
			if ((ok = parse_num(name, optarg, 1, (1u << 31) - 1, &v)))
				ntasks = (uint32_t)v;
			break;
		case 'd':
			if ((ok = parse_num(name, optarg, 1, 3600000, &v)))
				dur_ns = v * 1000000ull;
			break;
		case 'i':
			ok = parse_num(name, optarg, 0, 1ull << 50, &input_bytes);
			break;
		case 'b':
			burst = true;
			break;
		case 'o':
			only = true;
			break;
		case 'g':
			if ((ok = parse_num(name, optarg, 1, 100000, &v)))
				s.bytes_per_ns = (double)v / 8;
			break;
		case 'l':
			ok = parse_pct(name, optarg, &load_pct);
			break;
		case 'L':
			s.no_locality = true;
			break;
		case 'h':
			if ((ok = parse_num(name, optarg, 0, 10000000, &v)))
				s.hop_ns = v * 1000ull;
			break;
		case 'r': /* a report period of 0 would report forever at one instant */
			if ((ok = parse_num(name, optarg, 1, 3600000, &v)))
				s.report_ns = v * 1000000ull;
			break;
		case 'H':
			usage(stdout);
			return 0;
		case 'V':
			ferry__version_print("ferry-sched-sim");
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!ok)
		return 2;
	if (optind < argc) {
		fprintf(stderr, "ferry-sched-sim: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (only)
		return decide_only(s.nodes, s.slots, ntasks);
	if (groups)
		s.fanout = (s.nodes + groups - 1) / groups;
	build(&s);
	s.ntasks = ntasks;
	s.task = calloc(ntasks, sizeof(*s.task));
	s.capsamples = ntasks < 200000 ? ntasks : 200000;
	s.decide_samples = calloc(s.capsamples, sizeof(double));
	s.lat_samples = calloc(ntasks, sizeof(double));
	if (!s.task || !s.decide_samples || !s.lat_samples)
		return 1;
	/* Spread submissions keep load_pct of the slots busy: the rate at which slots free up. */
	uint64_t gap_ns =
		burst ? 0
		      : (uint64_t)((double)dur_ns / ((double)s.nodes * s.slots * load_pct / 100));
	for (uint32_t t = 0; t < ntasks; t++) {
		struct task *tk = &s.task[t];
		tk->dur_ns = dur_ns;
		tk->submit_node = burst ? 0 : (uint32_t)(rnd() % s.nodes);
		tk->input_node = burst ? UINT32_MAX : (uint32_t)(rnd() % s.nodes);
		tk->input_bytes = burst ? 0 : input_bytes;
		push(&s, (uint64_t)t * gap_ns, EV_SUBMIT, t, 0);
	}
	on_report(&s);
	uint64_t w0 = wall_ns();
	while (s.nheap) {
		struct event e = pop(&s);
		s.now = e.t_ns;
		dispatch(&s, e);
	}
	uint64_t w1 = wall_ns();
	qsort(s.decide_samples, s.nsamples, sizeof(double), cmp_double);
	double p50 = s.nsamples ? s.decide_samples[s.nsamples / 2] : 0;
	double p99 = s.nsamples ? s.decide_samples[s.nsamples * 99 / 100] : 0;
	qsort(s.lat_samples, s.finished, sizeof(double), cmp_double);
	printf("SIM nodes=%u slots=%u fanout=%u tasks=%u finished=%u burst=%d decisions=%llu "
	       "decisions_per_s=%.0f decide_ns_p50=%.0f decide_ns_p99=%.0f busy_95_ms=%.3f "
	       "local_fraction=%.4f max_hops=%llu hops_mean=%.3f lat_ms_mean=%.3f lat_ms_p50=%.3f "
	       "lat_ms_p99=%.3f fetched_fraction=%.4f sim_s=%.3f wall_s=%.3f\n",
	       s.nodes, s.slots, s.fanout, ntasks, s.finished, burst,
	       (unsigned long long)s.decisions,
	       s.decide_wall_ns ? (double)s.decisions * 1e9 / (double)s.decide_wall_ns : 0, p50,
	       p99, s.busy_95_ns ? (double)s.busy_95_ns / 1e6 : -1.0,
	       s.with_input ? (double)s.placed_local / (double)s.with_input : 0,
	       (unsigned long long)s.max_hops, s.finished ? (double)s.hops_sum / s.finished : 0,
	       s.finished ? (double)s.lat_sum_ns / 1e6 / s.finished : 0,
	       s.finished ? s.lat_samples[s.finished / 2] : 0,
	       s.finished ? s.lat_samples[(uint64_t)s.finished * 99 / 100] : 0,
	       s.finished ? (double)s.fetched / s.finished : 0, (double)s.now / 1e9,
	       (double)(w1 - w0) / 1e9);
	int ret = s.finished == ntasks ? 0 : 1;
	free_sim(&s);
	return ret;
}
