/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The placement decision that every level of the scheduler tree makes (a node's local
 * scheduler, a group scheduler, the global one) and that the simulator runs at 10,000 nodes:
 * pure data structures over a level's children (nodes, or the groups below), no I/O.
 *
 * A child is known by its load report: totals, available amounts, queue length and mean task
 * time (a group reports the sums of its subtree plus, per resource, the largest amount one of
 * its nodes has free and has at all, so that "fits in one node" survives aggregation). A task
 * goes to the feasible child with the least estimated wait:
 *
 *     wait = (it fits now ? 0 : queue length x mean task time)
 *          + bytes of its inputs not under that child / bandwidth to the child
 *
 * with ties broken to pack before spreading (DEFAULT), or to the emptiest child (SPREAD).
 *
 * DESIGN: a decision must not cost more as the level grows. Nothing scans the children:
 * - the children that hold a task's inputs are found through a node -> child map (the object
 *   directory gives nodes), so locality costs O(inputs x locations);
 * - per resource kind, children are kept in 101 buckets by the share of that kind they have free
 *   (0..100 %), each a list, with a bitmap of non-empty buckets: packing takes the fullest bucket
 *   under the threshold that holds a child that fits, spreading the emptiest, each probing a
 *   bounded number of children; the kind used is the one the task asks for that the fewest
 *   children have (GPU tasks never probe CPU-only nodes);
 * - children that fit nothing now sit in 64 buckets by log2 of their queued wait, so a task that
 *   must queue finds the shortest queue the same way.
 * Every report or commit moves a child between buckets in O(kinds). A decision probes at most
 * FERRY__SCHED_PROBES children for one that fits now and as many again for the shortest queue,
 * beyond its input holders (only a task that few children can ever run, by their totals, looks
 * further, until it finds one); a child missed that way is one the buckets placed no better.
 *
 * Amounts are fixed point: 1/FERRY__SCHED_UNIT of a unit (10000, as the node's resources), bytes
 * for memory. Kinds are small integers (0 CPU, 1 GPU, 2 memory, 3 object store memory, then
 * custom kinds numbered by whoever owns the level, up to FERRY__SCHED_KINDS).
 *
 * Thread model: a level is not thread-safe; its scheduler's loop owns it.
 */
#ifndef FERRY_SCHED_POLICY_H
#define FERRY_SCHED_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__SCHED_UNIT 10000	   /* fixed-point amounts: 1 CPU = 10000 */
#define FERRY__SCHED_KINDS 68	   /* 4 standard kinds + 64 custom (a node's limit) */
#define FERRY__SCHED_DEMAND_MAX 8  /* kinds one task may ask for */
#define FERRY__SCHED_PROBES 64	   /* children probed per decision beyond the input holders */
#define FERRY__SCHED_INPUTS_MAX 64 /* input objects weighed per decision (the first) */
#define FERRY__SCHED_NO_CHILD UINT32_MAX
/* Inputs smaller than this are not worth a hop to their node (~1 ms at 1 GB/s). */
#define FERRY__SCHED_LOCALITY_MIN_BYTES (1u << 20)

enum ferry__sched_kind {
	FERRY__SCHED_CPU = 0,
	FERRY__SCHED_GPU = 1,
	FERRY__SCHED_MEMORY = 2,
	FERRY__SCHED_STORE = 3,
};

enum ferry__sched_strategy {
	FERRY__SCHED_DEFAULT = 0,	/* locality, then pack up to the threshold, then spread */
	FERRY__SCHED_SPREAD = 1,	/* the child with the most free, round robin among equals */
	FERRY__SCHED_NODE_AFFINITY = 2, /* one node (hard: only there; soft: there if it fits) */
};

struct ferry__sched_amount {
	uint32_t kind;	/* enum ferry__sched_kind or a custom kind < FERRY__SCHED_KINDS */
	int64_t amount; /* fixed point, > 0 */
};

/* One input object of a task: its size and the nodes that hold a copy. */
struct ferry__sched_input {
	uint64_t size_bytes;	   /* data + metadata */
	uint32_t nlocations;	   /* length of locations */
	const uint32_t *locations; /* node numbers (ferry__sched_level_map_node) */
};

struct ferry__sched_task {
	uint32_t ndemand;					    /* <= DEMAND_MAX */
	struct ferry__sched_amount demand[FERRY__SCHED_DEMAND_MAX]; /* distinct kinds */
	uint32_t ninputs;					    /* length of inputs */
	const struct ferry__sched_input *inputs;		    /* by ref arguments */
	enum ferry__sched_strategy strategy;			    /* how to choose */
	uint32_t affinity_node;					    /* NODE_AFFINITY's node */
	bool affinity_soft;	 /* NODE_AFFINITY: may go elsewhere */
	bool exclude;		 /* never to excluded_child (the group that sent it up) */
	uint32_t excluded_child; /* with exclude: a child this task must not go to */
};

/* A child's load report (a node's own, or a group's summary of its subtree). */
struct ferry__sched_load {
	uint64_t version;		       /* newer wins; an older report is ignored */
	int64_t total[FERRY__SCHED_KINDS];     /* sum over the subtree */
	int64_t avail[FERRY__SCHED_KINDS];     /* free now, sum over the subtree */
	int64_t total_max[FERRY__SCHED_KINDS]; /* the most one node has (a node: total) */
	int64_t avail_max[FERRY__SCHED_KINDS]; /* the most one node has free (a node: avail) */
	uint32_t queue_len;		       /* tasks waiting for resources */
	uint64_t mean_task_ns;		       /* 0 until tasks have run */
	uint64_t bandwidth_bytes_per_s;	       /* to this child; 0: the level's default */
};

enum ferry__sched_verdict {
	FERRY__SCHED_RUNS_NOW = 0, /* the child has the resources free */
	FERRY__SCHED_QUEUES = 1,   /* it will have them; the task waits in its queue */
};

struct ferry__sched_decision {
	uint32_t child;			   /* where the task goes */
	enum ferry__sched_verdict verdict; /* runs now or queues there */
	uint64_t est_wait_ns;		   /* the estimate that chose it */
	uint64_t local_bytes;		   /* input bytes already under it */
	uint64_t subtree_bytes;		   /* input bytes with a copy anywhere under this level */
	uint64_t input_bytes;		   /* input bytes weighed */
	uint32_t probes;		   /* children looked at (for the benches) */
};

struct ferry__sched_level_opts {
	double pack_threshold;		/* DEFAULT packs up to this utilisation (0: 0.5) */
	uint64_t bandwidth_bytes_per_s; /* default bandwidth to a child (0: 1.25 GB/s) */
	uint64_t mean_task_ns;		/* a queue's task time before any is known (0: 1 ms) */
};

struct ferry__sched_level;

/* ferry__sched_level_create() - an empty level. 0, -EINVAL (a threshold outside 0..1), -ENOMEM. */
int ferry__sched_level_create(const struct ferry__sched_level_opts *opts,
			      struct ferry__sched_level **out);
void ferry__sched_level_destroy(struct ferry__sched_level *l);

/*
 * ferry__sched_child_add() - a new child, with no resources until its first report (it takes
 * nothing). Children are numbered 0, 1, ... in the order added. 0 or -ENOMEM.
 */
int ferry__sched_child_add(struct ferry__sched_level *l, uint32_t *child);

/*
 * ferry__sched_child_report() - @child's new load. A report whose version is not newer than the
 * last one is ignored (reports may arrive out of order) and returns 0. -EINVAL: no such child,
 * or a negative amount, or available above total. -ESRCH: the child is dead.
 */
int ferry__sched_child_report(struct ferry__sched_level *l, uint32_t child,
			      const struct ferry__sched_load *load);

/* ferry__sched_child_dead() - @child takes nothing more (its node died). 0 or -EINVAL. */
int ferry__sched_child_dead(struct ferry__sched_level *l, uint32_t child);

/*
 * ferry__sched_child_revive() - a dead @child takes its next report as a first one, and lives
 * again from it (a group scheduler that went silent and came back: its child, and the nodes
 * mapped to it, stay the same). A child alive is left as it is. 0 or -EINVAL.
 */
int ferry__sched_child_revive(struct ferry__sched_level *l, uint32_t child);

/*
 * ferry__sched_level_map_node() - node number @node lies under @child, so an input held on
 * @node is local to @child. Node numbers are dense small integers given by the caller (the GCS's
 * node index). 0, -EINVAL (no such child), -ENOMEM.
 */
int ferry__sched_level_map_node(struct ferry__sched_level *l, uint32_t node, uint32_t child);

/*
 * ferry__sched_decide() - where @task goes. 0 with *@out filled; -ENOSPC when no live child could
 * ever run it (no child has that much of some kind: the caller keeps it as infeasible, warns and
 * records it); -EHOSTUNREACH for a hard NODE_AFFINITY to a node that is dead, unknown or too
 * small; -EINVAL for a malformed task (too many or repeated kinds, a kind out of range, an amount
 * <= 0). The decision changes nothing: see ferry__sched_commit.
 */
int ferry__sched_decide(struct ferry__sched_level *l, const struct ferry__sched_task *task,
			struct ferry__sched_decision *out);

/*
 * ferry__sched_forward_up() - should a level that has a parent send the task up instead of
 * placing it as @d says? Yes when nothing under it can run the task now, or when clearly more
 * of its input lies outside this level's subtree (over half of the input bytes, and at least
 * FERRY__SCHED_LOCALITY_MIN_BYTES): the level above knows where. A task that came down from
 * above is placed, never sent up again (the caller's rule), so a task makes at most one trip up
 * and one down the tree.
 */
bool ferry__sched_forward_up(const struct ferry__sched_decision *d);

/*
 * ferry__sched_commit() - account @task on @d's child until its next report: its free amounts
 * go down by the demand (RUNS_NOW) or its queue grows by one (QUEUES), so a burst of decisions
 * between two reports spreads as it should instead of piling onto one child.
 */
void ferry__sched_commit(struct ferry__sched_level *l, const struct ferry__sched_task *task,
			 const struct ferry__sched_decision *d);

/*
 * ferry__sched_level_summary() - this level's subtree as one load report for the level above:
 * sums of totals and free amounts, maxima per kind, queue lengths summed, mean task time
 * weighted by queue. O(children x kinds in use): called once per report period, not per task.
 */
void ferry__sched_level_summary(const struct ferry__sched_level *l, uint64_t version,
				struct ferry__sched_load *out);

/* ferry__sched_level_children() - the number of children added (dead ones included). */
uint32_t ferry__sched_level_children(const struct ferry__sched_level *l);

/* ferry__sched_child_load() - @child's current view (its last report minus commits). 0 or -EINVAL. */
int ferry__sched_child_load(const struct ferry__sched_level *l, uint32_t child,
			    struct ferry__sched_load *out);

#endif
