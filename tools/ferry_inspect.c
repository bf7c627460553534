/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `ferry list objects`, `ferry memory`, `ferry timeline` and the store lines of `ferry status`
 * (issue 25), read from the nodes (ferry_node_query.c) and the GCS's object directory.
 *
 * DESIGN
 * - Paged, never a whole store at once: a node lists at most 1,000 objects per reply and the
 *   command asks for the next page after the last ID; with --limit it stops asking once it has
 *   enough rows. The directory is asked for the listed IDs only, in batches.
 * - A node that cannot be read (down, refused, too slow) is a line on stderr naming it and the
 *   reason; the others are still shown. The command fails only when no node could be read.
 * - The timeline is Chrome's trace-event JSON (the "X" complete events with ts and dur in
 *   microseconds): Perfetto and chrome://tracing open it. One process per node, one thread per
 *   kind of event (pulls by transport, leases by worker pid), wall-clock times, so the nodes of
 *   a cluster line up.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/gcs.h>
#include <ferry/id.h>

#include "common/alloc.h"
#include "common/util.h"
#include "common/wire.h"
#include "tools/ferry_cli.h"
#include "tools/ferry_inspect.h"

#define PAGE 1000u
#define LOOKUP_BATCH 4096u

void ferry__cli_json_str(const char *s)
{
	if (!s) {
		fputs("null", stdout);
		return;
	}
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

static const char *hex(const void *id, size_t n, char *buf, size_t size)
{
	ferry_id_to_hex(id, n, buf, size);
	return buf;
}

static bool node_matches(const struct ferry_gcs_node_info *n, const char *prefix)
{
	char h[2 * sizeof(n->id) + 1];

	return !prefix || !strncmp(hex(n->id.bytes, sizeof(n->id.bytes), h, sizeof(h)), prefix,
				   strlen(prefix));
}

static void say_unreadable(const struct ferry_gcs_node_info *n, const char *why)
{
	char h[2 * sizeof(n->id) + 1];

	ferry__cli_fail("node %.12s: %s", hex(n->id.bytes, sizeof(n->id.bytes), h, sizeof(h)), why);
}

/* ---- status figures ---- */

void ferry__cli_figures(const char *address, const char *token_path, unsigned timeout_s,
			struct ferry__cli_figures *out)
{
	struct ferry__cli_node c;
	struct ferry__frame f;
	int r;

	memset(out, 0, sizeof(*out));
	r = ferry__cli_node_open(&c, address, token_path, timeout_s);
	if (r == 0)
		r = ferry__cli_node_ask(
			&c, FERRY__WIRE_MSG_PLASMA_STATS,
			ferry__wire_plasma_stats_build(
				&c.fb, &(struct ferry__wire_plasma_stats){.seq = 1}),
			FERRY__WIRE_MSG_PLASMA_STATS_REPLY, &f);
	if (r == 0) {
		struct ferry__wire_plasma_stats_reply_view v =
			ferry__wire_plasma_stats_reply_root_verified(f.payload);

		r = ferry__wire_plasma_stats_reply_status(v);
		out->capacity = ferry__wire_plasma_stats_reply_capacity_bytes(v);
		out->used = ferry__wire_plasma_stats_reply_used_bytes(v);
		out->objects = ferry__wire_plasma_stats_reply_objects(v);
		out->pinned = ferry__wire_plasma_stats_reply_pinned_objects(v);
		out->primary = ferry__wire_plasma_stats_reply_primary_objects(v);
		out->spilled_objects = ferry__wire_plasma_stats_reply_spilled_objects(v);
		out->spilled_bytes = ferry__wire_plasma_stats_reply_spilled_bytes(v);
		out->evicted_objects = ferry__wire_plasma_stats_reply_evicted_objects(v);
		out->evicted_bytes = ferry__wire_plasma_stats_reply_evicted_bytes(v);
		if (r < 0)
			snprintf(c.why, sizeof(c.why), "store stats: %s", ferry_strerror(r));
	}
	if (r == 0)
		r = ferry__cli_node_ask(&c, FERRY__WIRE_MSG_NODE_INFO,
					ferry__wire_node_info_build(
						&c.fb, &(struct ferry__wire_node_info){.seq = 2}),
					FERRY__WIRE_MSG_NODE_INFO_REPLY, &f);
	if (r == 0) {
		struct ferry__wire_node_info_reply_view v =
			ferry__wire_node_info_reply_root_verified(f.payload);

		out->pulls_in_flight = ferry__wire_node_info_reply_pulls_in_flight(v);
		out->pulls_ok = ferry__wire_node_info_reply_pulls_ok(v);
		out->pulls_failed = ferry__wire_node_info_reply_pulls_failed(v);
		out->bytes_pulled = ferry__wire_node_info_reply_bytes_pulled(v);
		out->requests_served = ferry__wire_node_info_reply_requests_served(v);
		out->bytes_served = ferry__wire_node_info_reply_bytes_served(v);
		out->workers_idle = ferry__wire_node_info_reply_workers_idle(v);
		out->workers_leased = ferry__wire_node_info_reply_workers_leased(v);
		out->workers_starting = ferry__wire_node_info_reply_workers_starting(v);
		out->queue_length = ferry__wire_node_info_reply_queue_length(v);
		out->uptime_ms = ferry__wire_node_info_reply_uptime_ms(v);
	}
	out->status = r;
	if (r < 0)
		snprintf(out->why, sizeof(out->why), "%s", c.why);
	ferry__cli_node_close(&c);
}

/* ---- objects and memory ---- */

struct copy {
	struct ferry_object_id id;
	int node;	/* index in the node list */
	uint8_t state;	/* PlasmaObjectState */
	bool primary;	/* a primary copy (its owner's), else an evictable secondary */
	uint64_t bytes; /* data + metadata */
	uint32_t pins;	/* clients holding it */
	struct ferry_worker_id owner;
	int dir; /* its directory entry's index in the lookups, -1: none */
};

struct listing {
	struct copy *copies;
	size_t n, cap;
	struct ferry_gcs_object_batch **batches; /* directory look-ups, LOOKUP_BATCH per batch */
	size_t nbatches;
};

static int add_copy(struct listing *l, const struct copy *c)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 256;
		struct copy *more = ferry__realloc(l->copies, cap * sizeof(*more));

		if (!more)
			return -ENOMEM;
		l->copies = more;
		l->cap = cap;
	}
	l->copies[l->n++] = *c;
	return 0;
}

/* Page through node @i's store into @l, at most @want copies (0: all). */
static int list_node(struct listing *l, const struct ferry_gcs_node_info *n, int i,
		     const char *token_path, unsigned timeout_s, size_t want)
{
	struct ferry__cli_node c;
	struct ferry__wire_plasma_list q = {.max_objects = PAGE, .include_unsealed = true};
	struct ferry__frame f;
	size_t got = 0;
	bool more = true;
	int r = ferry__cli_node_open(&c, n->address, token_path, timeout_s);

	while (r == 0 && more && (!want || got < want)) {
		struct ferry__wire_plasma_list_reply_view v;
		size_t count;

		q.seq++;
		r = ferry__cli_node_ask(&c, FERRY__WIRE_MSG_PLASMA_LIST,
					ferry__wire_plasma_list_build(&c.fb, &q),
					FERRY__WIRE_MSG_PLASMA_LIST_REPLY, &f);
		if (r < 0)
			break;
		v = ferry__wire_plasma_list_reply_root_verified(f.payload);
		if ((r = ferry__wire_plasma_list_reply_status(v)) < 0) {
			snprintf(c.why, sizeof(c.why), "listing its store: %s", ferry_strerror(r));
			break;
		}
		count = ferry__wire_plasma_list_reply_objects_count(v);
		more = ferry__wire_plasma_list_reply_more(v) && count > 0;
		for (size_t k = 0; k < count && r == 0 && (!want || got < want); k++) {
			struct ferry__wire_plasma_object_info_view o =
				ferry__wire_plasma_list_reply_objects_at(v, k);
			struct ferry__wire_unique_id owner =
				ferry__wire_plasma_object_info_owner_id(o);
			struct copy cp = {
				.id = ferry__wire_plasma_object_info_object_id(o),
				.node = i,
				.state = ferry__wire_plasma_object_info_state(o),
				.primary = ferry__wire_plasma_object_info_copy(o) ==
					   FERRY__WIRE_PLASMA_COPY_KIND_PRIMARY,
				.bytes = ferry__wire_plasma_object_info_data_size(o) +
					 ferry__wire_plasma_object_info_metadata_size(o),
				.pins = ferry__wire_plasma_object_info_pin_count(o),
				.dir = -1,
			};

			memcpy(cp.owner.bytes, owner.bytes, sizeof(cp.owner.bytes));
			q.after = cp.id;
			r = add_copy(l, &cp);
			got++;
		}
	}
	if (r < 0)
		say_unreadable(n, r == -ENOMEM ? "out of memory" : c.why);
	ferry__cli_node_close(&c);
	return r;
}

/* The directory's entries of every listed ID (a copy's dir indexes them: batch * B + k). */
static void look_up(struct ferry_gcs_client *gcs, struct listing *l)
{
	struct ferry_object_id *ids = ferry__calloc(LOOKUP_BATCH, sizeof(*ids));
	size_t nb = (l->n + LOOKUP_BATCH - 1) / LOOKUP_BATCH;

	l->batches = ferry__calloc(nb + 1, sizeof(*l->batches));
	if (!ids || !l->batches) {
		ferry__free(ids);
		return;
	}
	for (size_t b = 0; b < nb; b++) {
		size_t n = FERRY_MIN(LOOKUP_BATCH, l->n - b * LOOKUP_BATCH);
		int r;

		for (size_t k = 0; k < n; k++)
			ids[k] = l->copies[b * LOOKUP_BATCH + k].id;
		r = ferry_gcs_object_lookup_batch(gcs, ids, n, &l->batches[b]);
		if (r < 0) {
			ferry__cli_fail("looking up objects in the directory: %s",
					ferry_strerror(r));
			l->batches[b] = NULL;
			continue;
		}
		for (size_t k = 0; k < n; k++)
			if (l->batches[b]->status[k] == 0)
				l->copies[b * LOOKUP_BATCH + k].dir = (int)(b * LOOKUP_BATCH + k);
	}
	l->nbatches = nb;
	ferry__free(ids);
}

static const struct ferry_gcs_object_info *dir_of(const struct listing *l, const struct copy *c)
{
	if (c->dir < 0 || !l->batches[c->dir / LOOKUP_BATCH])
		return NULL;
	return &l->batches[c->dir / LOOKUP_BATCH]->infos[c->dir % LOOKUP_BATCH];
}

static const char *state_name(uint8_t s)
{
	switch (s) {
	case FERRY__WIRE_PLASMA_OBJECT_STATE_CREATING:
		return "creating";
	case FERRY__WIRE_PLASMA_OBJECT_STATE_SEALED:
		return "sealed";
	case FERRY__WIRE_PLASMA_OBJECT_STATE_DELETING:
		return "deleting";
	case FERRY__WIRE_PLASMA_OBJECT_STATE_SPILLED:
		return "spilled";
	}
	return "?";
}

/* Who owns it, as an operator reads it: "pid P@NODE" for a worker or driver the GCS knows. */
static void owner_text(const struct ferry_worker_id *owner, const struct ferry_gcs_worker_info *ws,
		       int nws, char *buf, size_t size)
{
	char h[2 * sizeof(owner->bytes) + 1], nh[2 * sizeof(ws[0].node.bytes) + 1];

	if (ferry_id_is_nil(owner->bytes, sizeof(owner->bytes))) {
		snprintf(buf, size, "-");
		return;
	}
	for (int i = 0; i < nws; i++) {
		if (memcmp(ws[i].id.bytes, owner->bytes, sizeof(owner->bytes)))
			continue;
		snprintf(buf, size, "pid %u@%.8s%s", ws[i].pid,
			 hex(ws[i].node.bytes, sizeof(ws[i].node.bytes), nh, sizeof(nh)),
			 ws[i].state == FERRY_GCS_WORKER_DEAD ? " (dead)" : "");
		return;
	}
	snprintf(buf, size, "%.12s", hex(owner->bytes, sizeof(owner->bytes), h, sizeof(h)));
}

/* The nodes holding copies, as the directory says: "a1b2c3d4,e5f6..." (at most @size). */
static void copies_text(const struct ferry_gcs_object_info *d, char *buf, size_t size)
{
	size_t len = 0;

	buf[0] = '\0';
	if (!d) {
		snprintf(buf, size, "(not in the directory)");
		return;
	}
	for (uint32_t i = 0; i < d->nlocations && len + 10 < size; i++) {
		char h[2 * sizeof(d->locations[i].bytes) + 1];

		len += (size_t)snprintf(
			buf + len, size - len, "%s%.8s", i ? "," : "",
			hex(d->locations[i].bytes, sizeof(d->locations[i].bytes), h, sizeof(h)));
	}
	if (!d->nlocations)
		snprintf(buf, size, "-");
}

static void print_copy_json(const struct listing *l, const struct copy *c,
			    const struct ferry_gcs_node_info *nodes, bool first)
{
	const struct ferry_gcs_object_info *d = dir_of(l, c);
	char h[65];

	printf("%s\n  {\"object\": \"%s\"", first ? "" : ",",
	       hex(c->id.bytes, sizeof(c->id.bytes), h, sizeof(h)));
	printf(", \"node\": \"%s\"",
	       hex(nodes[c->node].id.bytes, sizeof(nodes[c->node].id.bytes), h, sizeof(h)));
	printf(", \"state\": \"%s\", \"copy\": \"%s\", \"bytes\": %" PRIu64 ", \"pins\": %u",
	       state_name(c->state), c->primary ? "primary" : "secondary", c->bytes, c->pins);
	printf(", \"owner\": ");
	if (ferry_id_is_nil(c->owner.bytes, sizeof(c->owner.bytes)))
		printf("null");
	else
		printf("\"%s\"", hex(c->owner.bytes, sizeof(c->owner.bytes), h, sizeof(h)));
	printf(", \"locations\": ");
	if (!d) {
		printf("null}");
		return;
	}
	printf("[");
	for (uint32_t i = 0; i < d->nlocations; i++)
		printf("%s\"%s\"", i ? ", " : "",
		       hex(d->locations[i].bytes, sizeof(d->locations[i].bytes), h, sizeof(h)));
	printf("]}");
}

static int by_node_then_size(const void *a, const void *b)
{
	const struct copy *x = a, *y = b;

	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return x->bytes == y->bytes ? 0 : x->bytes > y->bytes ? -1 : 1;
}

void ferry__cli_size_text(uint64_t b, char *buf, size_t size)
{
	if (b >= (1ull << 30))
		snprintf(buf, size, "%.1f GiB", (double)b / (1ull << 30));
	else if (b >= (1ull << 20))
		snprintf(buf, size, "%.1f MiB", (double)b / (1ull << 20));
	else if (b >= (1ull << 10))
		snprintf(buf, size, "%.1f KiB", (double)b / (1ull << 10));
	else
		snprintf(buf, size, "%" PRIu64 " B", b);
}

/* `ferry memory`: per node what its store holds and who keeps it there. */
static void print_memory(const struct listing *l, const struct ferry_gcs_node_info *nodes,
			 const struct ferry_gcs_worker_info *ws, int nws, unsigned limit)
{
	uint64_t all = 0, all_pinned = 0;
	unsigned shown = 0;

	for (size_t i = 0; i < l->n;) {
		int node = l->copies[i].node;
		uint64_t bytes = 0, pinned = 0, primary = 0, spilled = 0;
		size_t n = 0, npinned = 0, nprimary = 0, end = i;
		char h[65], a[32], b[32], c[32], d[32];

		for (; end < l->n && l->copies[end].node == node; end++, n++) {
			const struct copy *cp = &l->copies[end];

			bytes += cp->bytes;
			pinned += cp->pins ? cp->bytes : 0;
			npinned += cp->pins > 0;
			primary += cp->primary ? cp->bytes : 0;
			nprimary += cp->primary;
			spilled += cp->state == FERRY__WIRE_PLASMA_OBJECT_STATE_SPILLED ? cp->bytes
											: 0;
		}
		ferry__cli_size_text(bytes, a, sizeof(a));
		ferry__cli_size_text(pinned, b, sizeof(b));
		ferry__cli_size_text(primary, c, sizeof(c));
		ferry__cli_size_text(spilled, d, sizeof(d));
		printf("node %.12s: %zu objects, %s (pinned by a client: %zu, %s; primary copies: "
		       "%zu, %s; spilled: %s)\n",
		       hex(nodes[node].id.bytes, sizeof(nodes[node].id.bytes), h, sizeof(h)), n, a,
		       npinned, b, nprimary, c, d);
		if (n)
			printf("  %-12s  %10s  %-9s  %-8s  %4s  %-22s  %s\n", "OBJECT", "SIZE",
			       "COPY", "STATE", "PINS", "OWNER", "COPIES (directory)");
		for (; i < end; i++) {
			const struct copy *cp = &l->copies[i];
			char own[64], copies[96];

			if (limit && shown >= limit)
				continue;
			shown++;
			ferry__cli_size_text(cp->bytes, a, sizeof(a));
			owner_text(&cp->owner, ws, nws, own, sizeof(own));
			copies_text(dir_of(l, cp), copies, sizeof(copies));
			printf("  %.12s  %10s  %-9s  %-8s  %4u  %-22s  %s\n",
			       hex(cp->id.bytes, sizeof(cp->id.bytes), h, sizeof(h)), a,
			       cp->primary ? "primary" : "secondary", state_name(cp->state),
			       cp->pins, own, copies);
		}
		all += bytes;
		all_pinned += pinned;
	}
	{
		char a[32], b[32];

		ferry__cli_size_text(all, a, sizeof(a));
		ferry__cli_size_text(all_pinned, b, sizeof(b));
		printf("total: %zu copies, %s, %s of them pinned by a client%s\n", l->n, a, b,
		       limit && shown < l->n ? " (rows cut by --limit)" : "");
	}
}

int ferry__cli_objects(struct ferry_gcs_client *gcs, const struct ferry_gcs_node_info *nodes,
		       int count, const char *token_path, unsigned timeout_s, const char *node,
		       unsigned limit, bool json, bool memory)
{
	struct listing l = {0};
	struct ferry_gcs_worker_info *ws = NULL;
	int read = 0, asked = 0, nws = 0;

	for (int i = 0; i < count; i++) {
		if (nodes[i].state == FERRY_GCS_NODE_DEAD || !node_matches(&nodes[i], node))
			continue;
		asked++;
		/* --limit bounds what is read too: a list of 10 needs no store's every page. */
		if (list_node(&l, &nodes[i], i, token_path, timeout_s,
			      limit && !memory ? limit - FERRY_MIN(l.n, limit) : 0) == 0)
			read++;
		if (limit && !memory && l.n >= limit)
			break;
	}
	if (asked == 0) {
		ferry__cli_fail(node ? "no live node's ID starts with %s" : "no live node%s",
				node ? node : "");
		return -ENOENT;
	}
	if (read == 0) {
		ferry__cli_fail("no node could be read");
		return -EIO;
	}
	look_up(gcs, &l);
	if (memory) {
		nws = ferry_gcs_worker_list(gcs, &ws);
		nws = nws < 0 ? 0 : nws;
		/* Each copy keeps its own index into the look-ups: sorting moves it along. */
		qsort(l.copies, l.n, sizeof(*l.copies), by_node_then_size);
	}
	if (json) {
		printf("[");
		for (size_t i = 0; i < l.n; i++)
			print_copy_json(&l, &l.copies[i], nodes, i == 0);
		printf("%s]\n", l.n ? "\n" : "");
	} else if (memory) {
		print_memory(&l, nodes, ws, nws, limit);
	} else {
		printf("%-12s  %-12s  %-9s  %-8s  %10s  %4s  %-12s  %s\n", "OBJECT", "NODE", "COPY",
		       "STATE", "SIZE", "PINS", "OWNER", "COPIES (directory)");
		for (size_t i = 0; i < l.n; i++) {
			const struct copy *cp = &l.copies[i];
			char h[65], nh[65], oh[65], sz[32], copies[96];

			ferry__cli_size_text(cp->bytes, sz, sizeof(sz));
			copies_text(dir_of(&l, cp), copies, sizeof(copies));
			printf("%.12s  %.12s  %-9s  %-8s  %10s  %4u  %-12.12s  %s\n",
			       hex(cp->id.bytes, sizeof(cp->id.bytes), h, sizeof(h)),
			       hex(nodes[cp->node].id.bytes, sizeof(nodes[cp->node].id.bytes), nh,
				   sizeof(nh)),
			       cp->primary ? "primary" : "secondary", state_name(cp->state), sz,
			       cp->pins,
			       ferry_id_is_nil(cp->owner.bytes, sizeof(cp->owner.bytes))
				       ? "-"
				       : hex(cp->owner.bytes, sizeof(cp->owner.bytes), oh,
					     sizeof(oh)),
			       copies);
		}
		printf("%zu cop%s on %d node%s\n", l.n, l.n == 1 ? "y" : "ies", read,
		       read == 1 ? "" : "s");
	}
	for (size_t b = 0; b < l.nbatches; b++)
		ferry_gcs_free(l.batches[b]);
	ferry__free(l.batches);
	ferry__free(l.copies);
	ferry_gcs_free(ws);
	return read < asked ? -EIO : 0;
}

/* ---- timeline ---- */

static const char *transport_name(uint32_t t)
{
	switch (t) {
	case FERRY_GCS_TRANSPORT_RDMA:
		return "rdma";
	case FERRY_GCS_TRANSPORT_TCP:
		return "tcp";
	case FERRY_GCS_TRANSPORT_SHM:
		return "shm";
	case 0:
		return "local";
	}
	return "other";
}

/* One node's events as trace events on @out (pid: the node's index + 1). */
static int timeline_node(FILE *out, const struct ferry_gcs_node_info *n, int i,
			 const char *token_path, unsigned timeout_s, unsigned limit, bool *first,
			 size_t *events)
{
	struct ferry__cli_node c;
	struct ferry__frame f;
	char h[65];
	int r = ferry__cli_node_open(&c, n->address, token_path, timeout_s);

	if (r == 0)
		r = ferry__cli_node_ask(
			&c, FERRY__WIRE_MSG_TIMELINE,
			ferry__wire_timeline_build(
				&c.fb,
				&(struct ferry__wire_timeline){.seq = 1, .max_events = limit}),
			FERRY__WIRE_MSG_TIMELINE_REPLY, &f);
	if (r < 0) {
		say_unreadable(n, c.why);
		ferry__cli_node_close(&c);
		return r;
	}
	{
		struct ferry__wire_timeline_reply_view v =
			ferry__wire_timeline_reply_root_verified(f.payload);
		size_t count = ferry__wire_timeline_reply_events_count(v);

		r = ferry__wire_timeline_reply_status(v);
		if (r < 0) {
			say_unreadable(n, ferry_strerror(r));
			ferry__cli_node_close(&c);
			return r;
		}
		fprintf(out,
			"%s\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": "
			"{\"name\": \"node %.12s\"}}",
			*first ? "" : ",", i + 1,
			hex(n->id.bytes, sizeof(n->id.bytes), h, sizeof(h)));
		*first = false;
		for (size_t k = 0; k < count; k++) {
			struct ferry__wire_timeline_event_view e =
				ferry__wire_timeline_reply_events_at(v, k);
			struct ferry_object_id id = ferry__wire_timeline_event_object_id(e);
			struct ferry__wire_unique_id peer = ferry__wire_timeline_event_peer(e);
			char ph[65];
			bool pull = ferry__wire_timeline_event_kind(e) ==
				    FERRY__WIRE_TIMELINE_KIND_PULL;
			uint64_t dur = ferry__wire_timeline_event_duration_us(e);

			if (pull)
				fprintf(out,
					",\n{\"name\": \"pull %.12s\", \"cat\": \"pull\", \"ph\": "
					"\"X\", \"pid\": %d, \"tid\": \"%s\", \"ts\": %" PRIu64
					", \"dur\": %" PRIu64 ", \"args\": {\"object\": \"%s\", "
					"\"bytes\": %" PRIu64
					", \"from\": \"%.12s\", \"status\": %d}}",
					hex(id.bytes, sizeof(id.bytes), h, sizeof(h)), i + 1,
					transport_name(ferry__wire_timeline_event_transport(e)),
					ferry__wire_timeline_event_start_us(e), dur ? dur : 1, h,
					ferry__wire_timeline_event_bytes(e),
					hex(peer.bytes, sizeof(peer.bytes), ph, sizeof(ph)),
					ferry__wire_timeline_event_status(e));
			else
				fprintf(out,
					",\n{\"name\": \"lease\", \"cat\": \"lease\", \"ph\": "
					"\"X\", "
					"\"pid\": %d, \"tid\": \"worker %d\", \"ts\": %" PRIu64
					", \"dur\": %" PRIu64 ", \"args\": {\"job\": \"%.32s\", "
					"\"owner\": \"%.12s\", \"tasks\": %u, \"status\": %d}}",
					i + 1, ferry__wire_timeline_event_pid(e),
					ferry__wire_timeline_event_start_us(e), dur ? dur : 1,
					ferry__wire_timeline_event_name(e)
						? ferry__wire_timeline_event_name(e)
						: "",
					hex(peer.bytes, sizeof(peer.bytes), ph, sizeof(ph)),
					ferry__wire_timeline_event_tasks(e),
					ferry__wire_timeline_event_status(e));
		}
		*events += count;
	}
	ferry__cli_node_close(&c);
	return 0;
}

int ferry__cli_timeline(const struct ferry_gcs_node_info *nodes, int count, const char *token_path,
			unsigned timeout_s, const char *node, unsigned limit, const char *out_path)
{
	FILE *out = stdout;
	bool first = true;
	size_t events = 0;
	int read = 0, asked = 0;

	if (out_path && strcmp(out_path, "-")) {
		out = fopen(out_path, "w");
		if (!out) {
			ferry__cli_fail("cannot write %s: %s", out_path, ferry_strerror(-errno));
			return -errno;
		}
	}
	fprintf(out, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
	for (int i = 0; i < count; i++) {
		if (nodes[i].state == FERRY_GCS_NODE_DEAD || !node_matches(&nodes[i], node))
			continue;
		asked++;
		read += timeline_node(out, &nodes[i], i, token_path, timeout_s, limit, &first,
				      &events) == 0;
	}
	fprintf(out, "\n]}\n");
	if (out != stdout) {
		if (fclose(out) != 0) {
			ferry__cli_fail("writing %s: %s", out_path, ferry_strerror(-errno));
			return -EIO;
		}
		fprintf(stderr,
			"ferry: %zu events of %d node%s in %s (open it in Perfetto or "
			"chrome://tracing)\n",
			events, read, read == 1 ? "" : "s", out_path);
	}
	if (asked == 0) {
		ferry__cli_fail(node ? "no live node's ID starts with %s" : "no live node%s",
				node ? node : "");
		return -ENOENT;
	}
	return read == 0 ? -EIO : read < asked ? -EIO : 0;
}
