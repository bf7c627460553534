/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `ferry list nodes|workers|actors|placement-groups|jobs [--node ID] [--limit N] [--json]`: the
 * GCS's tables as an operator reads them (issue 25), one row each, or as a JSON array whose
 * objects carry every field. --node keeps the rows of the nodes whose ID starts with the given
 * hex (a node itself, the workers and actors on it, the groups with a bundle there, the jobs whose
 * driver runs there). Rows come in the GCS's order; --limit cuts the output, not the query.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/gcs.h>

#include "common/util.h"
#include "tools/ferry_cli.h"
#include "tools/ferry_inspect.h"

struct out {
	bool json;	    /* a JSON array instead of rows */
	unsigned limit;	    /* rows at most, 0: all */
	unsigned rows;	    /* printed so far */
	const char *node;   /* hex prefix of a node ID, or NULL */
	char hex[2][40];    /* ID texts of the row being printed */
	unsigned long skip; /* rows dropped by --limit */
};

static const char *id_hex(const void *bytes, size_t n, char *buf, size_t size)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = bytes;
	size_t i;

	for (i = 0; i < n && 2 * i + 2 < size; i++) {
		buf[2 * i] = digits[b[i] >> 4];
		buf[2 * i + 1] = digits[b[i] & 15];
	}
	buf[2 * i] = '\0';
	return buf;
}

static bool is_nil(const void *bytes, size_t n)
{
	const unsigned char *b = bytes;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* Does node @id match --node (or is there none)? */
static bool node_matches(const struct out *o, const struct ferry_node_id *id)
{
	char hex[40];

	return !o->node || !strncmp(id_hex(id->bytes, sizeof(id->bytes), hex, sizeof(hex)), o->node,
				    strlen(o->node));
}

/* Room for one more row? Opens the JSON object (after a comma) when there is. */
static bool row(struct out *o)
{
	if (o->limit && o->rows >= o->limit) {
		o->skip++;
		return false;
	}
	if (o->json)
		fputs(o->rows ? ",\n  {" : "\n  {", stdout);
	o->rows++;
	return true;
}

static const char *exit_name(enum ferry_gcs_exit e)
{
	static const char *const names[] = {"",		  "normal", "error",	      "node_died",
					    "owner_died", "killed", "out_of_restarts"};

	return (unsigned)e < sizeof(names) / sizeof(names[0]) ? names[e] : "?";
}

static void list_nodes(struct out *o, const struct ferry_gcs_node_info *n, int count)
{
	static const char *const states[] = {"?", "alive", "draining", "dead"};

	if (!o->json)
		printf("%-32s  %-8s  %6s  %4s  %s\n", "NODE", "STATE", "CPU", "GPU", "ADDRESS");
	for (int i = 0; i < count; i++) {
		const char *state = (unsigned)n[i].state < 4 ? states[n[i].state] : "?";

		if (!node_matches(o, &n[i].id) || !row(o))
			continue;
		id_hex(n[i].id.bytes, sizeof(n[i].id.bytes), o->hex[0], sizeof(o->hex[0]));
		if (!o->json) {
			printf("%-32s  %-8s  %6.4g  %4.4g  %s\n", o->hex[0], state, n[i].cpu,
			       n[i].gpu, n[i].address ? n[i].address : "-");
			continue;
		}
		printf("\"id\": \"%s\", \"state\": \"%s\", \"cpu\": %.4f, \"gpu\": %.4f, "
		       "\"memory_bytes\": %.0f, \"store_capacity_bytes\": %" PRIu64
		       ", \"address\": ",
		       o->hex[0], state, n[i].cpu, n[i].gpu, n[i].memory_bytes,
		       n[i].store_capacity_bytes);
		ferry__cli_json_str(n[i].address);
		putchar('}');
	}
}

static void list_workers(struct out *o, const struct ferry_gcs_worker_info *w, int count)
{
	if (!o->json)
		printf("%-32s  %-32s  %-6s  %8s  %s\n", "WORKER", "NODE", "STATE", "PID", "EXIT");
	for (int i = 0; i < count; i++) {
		const char *state = w[i].state == FERRY_GCS_WORKER_ALIVE ? "alive" : "dead";
		char job[40];

		if (!node_matches(o, &w[i].node) || !row(o))
			continue;
		id_hex(w[i].id.bytes, sizeof(w[i].id.bytes), o->hex[0], sizeof(o->hex[0]));
		id_hex(w[i].node.bytes, sizeof(w[i].node.bytes), o->hex[1], sizeof(o->hex[1]));
		id_hex(w[i].job.bytes, sizeof(w[i].job.bytes), job, sizeof(job));
		if (!o->json) {
			printf("%-32s  %-32s  %-6s  %8" PRIu32 "  %s%s%s\n", o->hex[0], o->hex[1],
			       state, w[i].pid, exit_name(w[i].exit_type),
			       w[i].exit_message ? ": " : "",
			       w[i].exit_message ? w[i].exit_message : "");
			continue;
		}
		printf("\"id\": \"%s\", \"node\": \"%s\", \"job\": ", o->hex[0], o->hex[1]);
		ferry__cli_json_str(is_nil(w[i].job.bytes, sizeof(w[i].job.bytes)) ? NULL : job);
		printf(", \"pid\": %" PRIu32 ", \"state\": \"%s\", \"exit\": \"%s\", "
		       "\"exit_message\": ",
		       w[i].pid, state, exit_name(w[i].exit_type));
		ferry__cli_json_str(w[i].exit_message);
		printf(", \"address\": ");
		ferry__cli_json_str(w[i].address);
		printf(", \"start_ms\": %" PRIu64 ", \"end_ms\": %" PRIu64 "}", w[i].start_ms,
		       w[i].end_ms);
	}
}

static void list_actors(struct out *o, const struct ferry_gcs_actor_info *a, int count)
{
	static const char *const states[] = {"?", "pending", "alive", "restarting", "dead"};

	if (!o->json)
		printf("%-32s  %-16s  %-16s  %-10s  %-32s  %s\n", "ACTOR", "NAME", "CLASS", "STATE",
		       "NODE", "RESTARTS");
	for (int i = 0; i < count; i++) {
		const char *state = (unsigned)a[i].state < 5 ? states[a[i].state] : "?";
		bool placed = !is_nil(a[i].node.bytes, sizeof(a[i].node.bytes));

		if ((o->node && (!placed || !node_matches(o, &a[i].node))) || !row(o))
			continue;
		id_hex(a[i].id.bytes, sizeof(a[i].id.bytes), o->hex[0], sizeof(o->hex[0]));
		id_hex(a[i].node.bytes, sizeof(a[i].node.bytes), o->hex[1], sizeof(o->hex[1]));
		if (!o->json) {
			printf("%-32s  %-16s  %-16s  %-10s  %-32s  %" PRIu32 "/%" PRId32 "%s%s\n",
			       o->hex[0], a[i].name ? a[i].name : "-",
			       a[i].class_name ? a[i].class_name : "-", state,
			       placed ? o->hex[1] : "-", a[i].num_restarts, a[i].max_restarts,
			       a[i].state == FERRY_GCS_ACTOR_DEAD ? "  " : "",
			       a[i].state == FERRY_GCS_ACTOR_DEAD ? exit_name(a[i].death_cause)
								  : "");
			continue;
		}
		printf("\"id\": \"%s\", \"name\": ", o->hex[0]);
		ferry__cli_json_str(a[i].name);
		printf(", \"class\": ");
		ferry__cli_json_str(a[i].class_name);
		printf(", \"state\": \"%s\", \"node\": ", state);
		ferry__cli_json_str(placed ? o->hex[1] : NULL);
		printf(", \"num_restarts\": %" PRIu32 ", \"max_restarts\": %" PRId32
		       ", \"death_cause\": \"%s\", \"death_message\": ",
		       a[i].num_restarts, a[i].max_restarts, exit_name(a[i].death_cause));
		ferry__cli_json_str(a[i].death_message);
		putchar('}');
	}
}

static void list_pgs(struct out *o, const struct ferry_gcs_pg_info *p, int count)
{
	static const char *const states[] = {"?", "pending", "created", "rescheduling", "removed"};
	static const char *const strategies[] = {"?", "PACK", "SPREAD", "STRICT_PACK",
						 "STRICT_SPREAD"};

	if (!o->json)
		printf("%-32s  %-16s  %-13s  %-12s  %s\n", "PLACEMENT GROUP", "NAME", "STRATEGY",
		       "STATE", "BUNDLES (CPU@node)");
	for (int i = 0; i < count; i++) {
		const char *state = (unsigned)p[i].state < 5 ? states[p[i].state] : "?";
		const char *strategy =
			(unsigned)p[i].strategy < 5 ? strategies[p[i].strategy] : "?";
		bool here = !o->node;

		for (uint32_t b = 0; b < p[i].nbundles && !here; b++)
			here = !is_nil(p[i].bundles[b].node.bytes, 16) &&
			       node_matches(o, &p[i].bundles[b].node);
		if (!here || !row(o))
			continue;
		id_hex(p[i].id.bytes, sizeof(p[i].id.bytes), o->hex[0], sizeof(o->hex[0]));
		if (o->json) {
			printf("\"id\": \"%s\", \"name\": ", o->hex[0]);
			ferry__cli_json_str(p[i].name);
			printf(", \"strategy\": \"%s\", \"state\": \"%s\", \"bundles\": [",
			       strategy, state);
		} else {
			printf("%-32s  %-16s  %-13s  %-12s ", o->hex[0],
			       p[i].name ? p[i].name : "-", strategy, state);
		}
		for (uint32_t b = 0; b < p[i].nbundles; b++) {
			const struct ferry_gcs_bundle *bu = &p[i].bundles[b];
			bool placed = !is_nil(bu->node.bytes, sizeof(bu->node.bytes));

			id_hex(bu->node.bytes, sizeof(bu->node.bytes), o->hex[1],
			       sizeof(o->hex[1]));
			if (!o->json) {
				printf(" %.4g@%.8s", bu->cpu, placed ? o->hex[1] : "-");
				continue;
			}
			printf("%s{\"cpu\": %.4f, \"gpu\": %.4f, \"memory_bytes\": %.0f, "
			       "\"node\": ",
			       b ? ", " : "", bu->cpu, bu->gpu, bu->memory_bytes);
			ferry__cli_json_str(placed ? o->hex[1] : NULL);
			putchar('}');
		}
		fputs(o->json ? "]}" : "\n", stdout);
	}
}

static void list_jobs(struct out *o, const struct ferry_gcs_job_info *j, int count)
{
	if (!o->json)
		printf("%-32s  %-9s  %-32s  %8s  %s\n", "JOB", "STATE", "DRIVER NODE", "PID",
		       "ENTRYPOINT");
	for (int i = 0; i < count; i++) {
		const char *state = j[i].state == FERRY_GCS_JOB_RUNNING ? "running" : "finished";

		if (!node_matches(o, &j[i].driver_node) || !row(o))
			continue;
		id_hex(j[i].id.bytes, sizeof(j[i].id.bytes), o->hex[0], sizeof(o->hex[0]));
		id_hex(j[i].driver_node.bytes, sizeof(j[i].driver_node.bytes), o->hex[1],
		       sizeof(o->hex[1]));
		if (!o->json) {
			printf("%-32s  %-9s  %-32s  %8" PRIu32 "  %s\n", o->hex[0], state,
			       o->hex[1], j[i].driver_pid, j[i].entrypoint ? j[i].entrypoint : "-");
			continue;
		}
		printf("\"id\": \"%s\", \"state\": \"%s\", \"driver_node\": \"%s\", "
		       "\"driver_pid\": %" PRIu32 ", \"entrypoint\": ",
		       o->hex[0], state, o->hex[1], j[i].driver_pid);
		ferry__cli_json_str(j[i].entrypoint);
		printf(", \"start_ms\": %" PRIu64 ", \"end_ms\": %" PRIu64 "}", j[i].start_ms,
		       j[i].end_ms);
	}
}

/* ---- tasks ---- */

/* One task as its steps tell it: the last step's state, the node and worker of the latest
 * steps that named one, when it was first heard of. */
struct task_row {
	const struct ferry_gcs_task_event *last;
	struct ferry_node_id node;
	struct ferry_worker_id worker;
	uint64_t first_ms;
};

static int by_task_then_time(const void *a, const void *b)
{
	const struct ferry_gcs_task_event *x = *(const struct ferry_gcs_task_event *const *)a;
	const struct ferry_gcs_task_event *y = *(const struct ferry_gcs_task_event *const *)b;
	int c = memcmp(x->task.bytes, y->task.bytes, sizeof(x->task.bytes));

	if (c)
		return c;
	if (x->time_ms != y->time_ms)
		return x->time_ms < y->time_ms ? -1 : 1;
	return x->state < y->state ? -1 : x->state > y->state; /* same ms: submit, sent, end */
}

static int by_first_seen(const void *a, const void *b)
{
	const struct task_row *x = a, *y = b;

	return x->first_ms < y->first_ms ? -1 : x->first_ms > y->first_ms;
}

static const char *task_state(enum ferry_gcs_task_state s)
{
	static const char *const names[] = {"?",       "submitted", "scheduled",
					    "running", "finished",  "failed"};

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* The steps the GCS keeps, one row per task, oldest first; --limit keeps the newest. */
static int list_tasks(struct out *o, const struct ferry_gcs_task_event *ev, int n)
{
	const struct ferry_gcs_task_event **by = calloc((size_t)n + 1, sizeof(*by));
	struct task_row *rows = calloc((size_t)n + 1, sizeof(*rows));
	size_t nrows = 0, first = 0, matching = 0;
	uint64_t now = ferry__wall_ms();

	if (!by || !rows) {
		free(by);
		free(rows);
		ferry__cli_fail("out of memory");
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++)
		by[i] = &ev[i];
	qsort(by, (size_t)n, sizeof(*by), by_task_then_time);
	for (int i = 0; i < n; i++) {
		struct task_row *r;

		if (!i || memcmp(by[i]->task.bytes, by[i - 1]->task.bytes, sizeof(by[i]->task)))
			rows[nrows++] = (struct task_row){.first_ms = by[i]->time_ms};
		r = &rows[nrows - 1];
		r->last = by[i];
		if (!is_nil(by[i]->node.bytes, sizeof(by[i]->node.bytes)))
			r->node = by[i]->node;
		if (!is_nil(by[i]->worker.bytes, sizeof(by[i]->worker.bytes)))
			r->worker = by[i]->worker;
	}
	qsort(rows, nrows, sizeof(*rows), by_first_seen);
	/* --limit shows the newest tasks: the older matching ones are skipped (and counted). */
	for (size_t i = 0; i < nrows; i++)
		matching += node_matches(o, &rows[i].node);
	if (o->limit && matching > o->limit) {
		o->skip = matching - o->limit;
		for (size_t left = o->skip; first < nrows && left; first++)
			left -= node_matches(o, &rows[first].node);
	}
	o->limit = 0;
	if (!o->json)
		printf("%-32s  %-24s  %-9s  %3s  %-12s  %-12s  %s\n", "TASK", "FUNCTION", "STATE",
		       "TRY", "NODE", "WORKER", "AGE");
	for (size_t i = first; i < nrows; i++) {
		const struct task_row *r = &rows[i];
		const struct ferry_gcs_task_event *e = r->last;
		bool no_node = is_nil(r->node.bytes, sizeof(r->node.bytes));
		bool no_worker = is_nil(r->worker.bytes, sizeof(r->worker.bytes));
		char job[40], node[40], worker[40];

		if (!node_matches(o, &r->node) || !row(o))
			continue;
		id_hex(e->task.bytes, sizeof(e->task.bytes), o->hex[0], sizeof(o->hex[0]));
		id_hex(e->job.bytes, sizeof(e->job.bytes), job, sizeof(job));
		id_hex(r->node.bytes, sizeof(r->node.bytes), node, sizeof(node));
		id_hex(r->worker.bytes, sizeof(r->worker.bytes), worker, sizeof(worker));
		if (!o->json) {
			printf("%-32s  %-24.24s  %-9s  %3u  %-12.12s  %-12.12s  %.1fs\n", o->hex[0],
			       e->name[0] ? e->name : "-", task_state(e->state), e->attempt,
			       no_node ? "-" : node, no_worker ? "-" : worker,
			       now > r->first_ms ? (double)(now - r->first_ms) / 1000 : 0.0);
			continue;
		}
		printf("\"task\": \"%s\", \"job\": \"%s\", \"function\": ", o->hex[0], job);
		ferry__cli_json_str(e->name[0] ? e->name : NULL);
		printf(", \"state\": \"%s\", \"attempt\": %u, \"node\": ", task_state(e->state),
		       e->attempt);
		ferry__cli_json_str(no_node ? NULL : node);
		printf(", \"worker\": ");
		ferry__cli_json_str(no_worker ? NULL : worker);
		printf(", \"first_ms\": %" PRIu64 ", \"last_ms\": %" PRIu64 "}", r->first_ms,
		       e->time_ms);
	}
	free(by);
	free(rows);
	return 0;
}

/* objects: read from the nodes (ferry_inspect.c), the rest from the GCS here. */
const char *const ferry__cli_list_kinds[] = {"nodes",  "objects",	   "tasks", "workers",
					     "actors", "placement-groups", "jobs",  NULL};

int ferry__cli_list(struct ferry_gcs_client *c, const char *what, const char *node, unsigned limit,
		    bool json)
{
	struct out o = {.json = json, .limit = limit, .node = node};
	void *rows = NULL;
	int n;

	if (!strcmp(what, "nodes"))
		n = ferry_gcs_node_list(c, (struct ferry_gcs_node_info **)&rows);
	else if (!strcmp(what, "workers"))
		n = ferry_gcs_worker_list(c, (struct ferry_gcs_worker_info **)&rows);
	else if (!strcmp(what, "actors"))
		n = ferry_gcs_actor_list(c, (struct ferry_gcs_actor_info **)&rows);
	else if (!strcmp(what, "placement-groups"))
		n = ferry_gcs_pg_list(c, (struct ferry_gcs_pg_info **)&rows);
	else if (!strcmp(what, "jobs"))
		n = ferry_gcs_job_list(c, (struct ferry_gcs_job_info **)&rows);
	else if (!strcmp(what, "tasks"))
		n = ferry_gcs_task_event_list(c, (struct ferry_gcs_task_event **)&rows);
	else
		return -EINVAL;
	if (n < 0) {
		ferry__cli_fail("listing %s failed: %s", what, ferry_strerror(n));
		return n;
	}
	if (json)
		putchar('[');
	if (!strcmp(what, "nodes"))
		list_nodes(&o, rows, n);
	else if (!strcmp(what, "workers"))
		list_workers(&o, rows, n);
	else if (!strcmp(what, "actors"))
		list_actors(&o, rows, n);
	else if (!strcmp(what, "placement-groups"))
		list_pgs(&o, rows, n);
	else if (!strcmp(what, "tasks"))
		n = list_tasks(&o, rows, n);
	else
		list_jobs(&o, rows, n);
	if (n < 0) {
		ferry_gcs_free(rows);
		return n;
	}
	ferry_gcs_free(rows);
	if (json)
		fputs(o.rows ? "\n]\n" : "]\n", stdout);
	else if (o.skip)
		printf("(%lu more: --limit %u)\n", o.skip, limit);
	else if (!o.rows)
		printf("(none)\n");
	return 0;
}
