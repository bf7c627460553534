/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched's part in the scheduler tree (sched/server.h): a group's members and its summaries
 * to the global level, groups as children of the global level, and requests forwarded up or
 * down with their answers relayed to the asker.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/metrics.h"
#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/wire.h"
#include "sched/server_int.h"

#define COMP "sched"

/* A group's entry at the global level is keyed like a node, by an ID made from its name. */
void ferry__sched_srv_group_id(const char *name, struct ferry_node_id *out)
{
	uint64_t h[2] = {ferry__hash_bytes(name, strlen(name), 0x67726f7570ull),
			 ferry__hash_bytes(name, strlen(name), 0x74726565ull)};

	memcpy(out->bytes, h, sizeof(out->bytes));
}

/*
 * Global: group @name's entry. A name not seen yet gets one while fewer than GROUPS_MAX exist;
 * a group that went silent (dead) and reports again gets its own back, its child revived, so
 * that restarts, or a peer cycling names through silence, take no new memory. 0, -ENOSPC
 * (logged, rate-limited per @peer), -ENOMEM.
 */
static int group_entry(struct ferry__sched_server *s, const char *name, const char *peer,
		       uint32_t *out)
{
	struct ferry_node_id gid;
	uint32_t gi;
	int ret;

	ferry__sched_srv_group_id(name, &gid);
	if (ferry__sched_srv_node_index(s, &gid, false, &gi) == 0 && s->nodes[gi].group) {
		if (s->nodes[gi].dead) {
			s->nodes[gi].dead = false;
			ferry__sched_child_revive(s->level, gi);
			FLOG_INFO(COMP, "group %s reports again", name);
		}
		*out = gi;
		return 0;
	}
	if (s->ngroups >= GROUPS_MAX) {
		FLOG_PEER_WARN(COMP, peer,
			       "%s: a summary of group %s ignored: %u groups known, the most this "
			       "level keeps",
			       peer, name, GROUPS_MAX);
		return -ENOSPC;
	}
	ret = ferry__sched_srv_node_index(s, &gid, true, &gi);
	if (ret == 0 && !(s->nodes[gi].group = ferry__strdup(name)))
		ret = -ENOMEM; /* the entry stays, a child that takes nothing; found again next time */
	if (ret < 0)
		return ret;
	s->ngroups++;
	*out = gi;
	return 0;
}

/* Global: a group's summary. Its members' own children take nothing from now on (the group
 * places on them) and map to the group's child, so that their inputs count as the group's.
 * A member is a node the GCS told us of: an ID we do not know is skipped (a summary comes
 * every REPORT_MS, so a node that joins is mapped by the next one). Taken as it came, a
 * summary of 65,536 made-up IDs made 65,536 new children: each 1 MiB frame grew the daemon
 * by tens of MiB, without bound. */
int ferry__sched_srv_group_load(struct ferry__sched_server *s, const char *peer,
				const void *payload, size_t len)
{
	struct ferry__sched_group_report *g = &s->group_report;
	struct ferry__sched_load load = {0};
	struct ferry_node_id id;
	uint32_t gi, m;

	if (ferry__sched_group_read(payload, len, g) < 0)
		return -EPROTO;
	if (group_entry(s, g->group, peer, &gi) < 0)
		return 0; /* -ENOMEM: the next report tries again; -ENOSPC: logged */
	load.version = g->version;
	load.queue_len = g->queue_len;
	load.mean_task_ns = g->mean_task_ns;
	for (uint32_t r = 0; r < g->nres; r++) {
		int k = ferry__sched_srv_kind_of(s, g->res_name[r], true);

		if (k < 0)
			continue;
		load.total[k] = g->total[r];
		load.avail[k] = g->avail[r];
		load.total_max[k] = g->total_max[r];
		load.avail_max[k] = g->avail_max[r];
	}
	if (ferry__sched_child_report(s->level, gi, &load) == 0)
		s->nodes[gi].reported = true;
	s->nodes[gi].report_ms = ferry__loop_now_ms();
	for (uint32_t i = 0; i < g->nmembers; i++) {
		if (ferry__sched_group_member(payload, i, &id) < 0 ||
		    ferry__sched_srv_node_index(s, &id, false, &m) < 0 || m == gi ||
		    s->nodes[m].group)
			continue;
		if (!s->nodes[m].grouped) {
			s->nodes[m].grouped = true;
			ferry__sched_child_dead(s->level, m);
		}
		ferry__sched_level_map_node(s->level, m, gi);
	}
	return 0;
}

static void on_member_subscribed(void *arg, int status, void *result)
{
	struct ferry__sched_server *s = arg;

	ferry_gcs_free(result);
	if (status < 0 && status != -ECANCELED)
		FLOG_WARN(COMP, "group %s: following a member's load: %s", s->group,
			  ferry_strerror(-status));
}

/* Whether entry @i is still the one its ID maps to (a group that reports again after it was
 * silent gets its entry back; a node that comes back after its death, a new one). */
bool ferry__sched_srv_current(const struct ferry__sched_server *s, uint32_t i)
{
	uint32_t *slot = ferry__hashmap_get(&s->by_node, s->nodes[i].id.bytes);

	return slot && *slot == i;
}

/* Global: a group silent for GROUP_SILENT_MS takes nothing; its nodes are out of reach from
 * here (a task only they could run is answered -EAGAIN, not -ENOSPC) until it reports again. */
void ferry__sched_srv_on_silent_timer(struct ferry__loop_timer *t, int status)
{
	struct ferry__sched_server *s = t->data;
	uint64_t now = ferry__loop_now_ms();

	if (status != 0)
		return;
	for (uint32_t i = 0; i < s->nnodes; i++) {
		struct snode *n = &s->nodes[i];

		if (!n->group || n->dead || now - n->report_ms < GROUP_SILENT_MS)
			continue;
		n->dead = true;
		ferry__sched_child_dead(s->level, i);
		FLOG_WARN(COMP, "group %s: no summary for %u ms, it takes nothing until it reports",
			  n->group, GROUP_SILENT_MS);
	}
	ferry__loop_timer_start(s->loop, t, GROUP_SILENT_MS / 3, 0,
				ferry__sched_srv_on_silent_timer);
}

/* A group: node @hex is one of ours. Its load reports are followed from now on, key by key, so
 * that the group sees its nodes' load and no other's. */
static void member_add(struct ferry__sched_server *s, const void *hex, size_t size)
{
	char text[2 * sizeof(struct ferry_node_id) + 1];
	struct ferry_node_id id;
	uint32_t i;

	if (size != sizeof(text) - 1)
		return;
	memcpy(text, hex, size);
	text[size] = '\0';
	if (ferry_id_from_hex(text, id.bytes, sizeof(id.bytes)) < 0 ||
	    ferry__sched_srv_node_index(s, &id, true, &i) < 0 || s->nodes[i].member)
		return;
	s->nodes[i].member = true;
	FLOG_INFO(COMP, "group %s: node %s joined", s->group, text);
	if (ferry_gcs_subscribe_async(s->gcs, FERRY_GCS_CH_NODE_LOAD, id.bytes, sizeof(id.bytes),
				      ferry__sched_srv_on_load_event, &s->subs[1],
				      on_member_subscribed, s) < 0)
		s->nodes[i].member = false; /* the next read tries again */
}

static void on_members(void *arg, int status, void *result)
{
	struct ferry__sched_server *s = arg;
	struct ferry_gcs_bytes *keys = result;

	s->members_reading = false;
	for (int i = 0; i < status; i++)
		member_add(s, keys[i].data, keys[i].size);
	ferry_gcs_free(result);
	if (status >= 0 || status == -ENOENT)
		s->subs[1].ready = true; /* the members known: requests are answered */
}

static void on_members_timer(struct ferry__loop_timer *t, int status)
{
	struct ferry__sched_server *s = t->data;
	char ns[128];

	if (status != 0)
		return;
	snprintf(ns, sizeof(ns), "%s%s", FERRY__SCHED_MEMBER_KV_PREFIX, s->group);
	if (!s->members_reading)
		s->members_reading =
			ferry_gcs_kv_keys_async(s->gcs, ns, strlen(ns), "", 0, on_members, s) == 0;
	ferry__loop_timer_start(s->loop, t, MEMBERS_POLL_MS, 0, on_members_timer);
}

/* A group: its summary to every global instance, with its live members. */
static void on_report_timer(struct ferry__loop_timer *t, int status)
{
	struct ferry__sched_server *s = t->data;
	const char *names[FERRY__SCHED_KINDS] = {"CPU", "GPU", "memory", "object_store_memory"};
	struct ferry__sched_load load;
	struct ferry_node_id *members;
	size_t n = 0;

	if (status != 0)
		return;
	ferry__loop_timer_start(s->loop, t, REPORT_MS, 0, on_report_timer);
	members = ferry__calloc(s->nnodes ? s->nnodes : 1, sizeof(*members));
	if (!members)
		return;
	for (unsigned k = 0; k < s->ncustom; k++)
		names[4 + k] = s->custom[k];
	for (uint32_t i = 0; i < s->nnodes && n < FERRY__SCHED_GROUP_MEMBERS_MAX; i++)
		if (s->nodes[i].member && !s->nodes[i].dead)
			members[n++] = s->nodes[i].id;
	ferry__sched_level_summary(s->level, ++s->report_version, &load);
	if (ferry__sched_group_build(&s->fb, s->group, &load, names, members, n) == 0)
		ferry__sched_uplink_send(s->uplink, FERRY__WIRE_MSG_SCHED_GROUP_LOAD,
					 ferry__fb_builder_data(&s->fb),
					 ferry__fb_builder_size(&s->fb));
	ferry__free(members);
}

/* A group's scheduler: its client up, its report links, its members' and reports' timers. */
int ferry__sched_srv_group_start(struct ferry__sched_server *s, const void *token, size_t token_len)
{
	int ret = ferry__sched_client_new(s->loop, s->gcs, token, token_len, &s->self, &s->up);

	if (ret == 0)
		ret = ferry__sched_uplink_new(s->loop, s->gcs, token, token_len, &s->self,
					      &s->uplink);
	if (ret < 0)
		return ret;
	/* A restarted group scheduler's reports must win over its last life's. */
	s->report_version = (uint64_t)ferry__loop_now_ms() << 16;
	s->members_timer.data = s;
	s->report_timer.data = s;
	ferry__loop_timer_start(s->loop, &s->members_timer, 0, 0, on_members_timer);
	ferry__loop_timer_start(s->loop, &s->report_timer, REPORT_MS, 0, on_report_timer);
	return 0;
}

/* ---- forwarding between levels ---- */

void ferry__sched_srv_sconn_unref(struct sconn *sc)
{
	if (--sc->refs == 0)
		ferry__free(sc);
}

/* One result, alone in its SchedPlaceReply (the asker matches it by request ID). */
static void reply_one(struct ferry__sched_server *s, struct sconn *sc,
		      const struct ferry__sched_result *r)
{
	int ret;

	if (!sc->conn)
		return; /* the asker left: it sends the request again elsewhere */
	ret = ferry__sched_reply_build(&s->fb, r, 1);
	if (ret == 0)
		ret = ferry__conn_send(sc->conn, FERRY__WIRE_MSG_SCHED_PLACE_REPLY,
				       ferry__fb_builder_data(&s->fb),
				       ferry__fb_builder_size(&s->fb));
	if (ret < 0) {
		FLOG_PEER_WARN(COMP, ferry__conn_peer(sc->conn), "%s: reply not sent (%s), closing",
			       ferry__conn_peer(sc->conn), ferry_strerror(-ret));
		ferry__conn_close(sc->conn);
	}
}

static void on_forwarded(void *arg, int status, const struct ferry_node_id *node,
			 const char *node_address)
{
	struct fwd *f = arg;
	struct ferry__sched_server *s = f->sc->srv;
	struct ferry__sched_result r = {.request_id = f->request_id, .status = status};

	if (status == 0) {
		r.node = *node;
		r.node_address = node_address;
		r.hops = (uint8_t)ferry__sched_client_hops(f->via);
	} else if (status != -ECANCELED && f->has_fallback && !s->nodes[f->fallback.child].dead) {
		/* The global level did not answer: the group's own best node, where it queues,
		 * committed as any placement (a burst of them spreads). */
		struct ferry__sched_task task = {.ndemand = f->ndemand};
		const struct snode *n = &s->nodes[f->fallback.child];

		memcpy(task.demand, f->demand, sizeof(task.demand));
		ferry__sched_commit(s->level, &task, &f->fallback);
		FLOG_INFO(COMP, "the level above: %s; placed in the group", ferry_strerror(status));
		r.status = 0;
		r.node = n->id;
		r.node_address = n->address ? n->address : "";
		r.hops = 1;
	}
	if (status != -ECANCELED)
		reply_one(s, f->sc, &r);
	ferry__sched_srv_sconn_unref(f->sc);
	ferry__free(f);
}

/* @it as a request of our own to @via: 0 (answered later through on_forwarded) or -errno. */
int ferry__sched_srv_forward(struct ferry__sched_server *s, struct sconn *sc,
			     const struct ferry__sched_item *it, struct ferry__sched_client *via,
			     const struct ferry__sched_task *task,
			     const struct ferry__sched_decision *fallback)
{
	struct ferry__res res[FERRY__SCHED_ITEM_RES_MAX];
	struct ferry__sched_place_req q = {.res = res,
					   .nres = it->nres,
					   .strategy = it->strategy,
					   .affinity = it->affinity,
					   .soft = it->soft,
					   .inputs = it->inputs,
					   .ninputs = it->ninputs,
					   .hops = (uint8_t)(it->hops + 1),
					   .from_group = s->group[0] ? s->group : NULL};
	struct fwd *f = ferry__malloc(sizeof(*f));
	int ret;

	if (!f)
		return -ENOMEM;
	if (ferry__sched_client_outstanding(via) >= FORWARDS_MAX) {
		ferry__free(f);
		return -EAGAIN;
	}
	for (uint32_t i = 0; i < it->nres; i++) {
		snprintf(res[i].name, sizeof(res[i].name), "%s", it->res_name[i]);
		res[i].amount = it->res_amount[i];
	}
	*f = (struct fwd){.sc = sc, .request_id = it->request_id, .via = via};
	if (fallback) {
		f->has_fallback = true;
		f->fallback = *fallback;
		f->ndemand = task->ndemand;
		memcpy(f->demand, task->demand, sizeof(f->demand));
	}
	q.id = ++s->next_fwd_id;
	ret = ferry__sched_client_place(via, &q, on_forwarded, f);
	if (ret < 0) {
		ferry__free(f);
		return ret;
	}
	sc->refs++;
	s->forwarded++;
	ferry__metric_add(FERRY__MC_sched_forwards, 1);
	return 0;
}

/* Global: the client to group entry @g's scheduler, made on first use. */
struct ferry__sched_client *ferry__sched_srv_group_client(struct ferry__sched_server *s,
							  struct snode *g)
{
	char ns[128];

	if (g->down)
		return g->down;
	snprintf(ns, sizeof(ns), "%s%s", FERRY__SCHED_GROUP_KV_PREFIX, g->group);
	if (ferry__sched_client_new(s->loop, s->gcs, s->listener_token, s->listener_token_len,
				    &s->self, &g->down) < 0)
		return NULL;
	ferry__sched_client_set_namespace(g->down, ns);
	return g->down;
}
