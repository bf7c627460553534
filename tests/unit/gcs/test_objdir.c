/* SPDX-License-Identifier: Apache-2.0 */
/* Object directory: states and locations, places of copies, owner and node death cascades,
 * change reports, sharding, and allocation failures. */
#include "common/alloc.h"
#include "ftest.h"
#include "gcs/objdir.h"

struct changes {
	int changed; /* reports with removed false */
	int removed; /* reports with removed true */
};

static void count_change(void *arg, const struct ferry__objdir_entry *e, bool removed)
{
	struct changes *c = arg;

	(void)e;
	if (removed)
		c->removed++;
	else
		c->changed++;
}

static struct ferry__objdir *new_dir(struct changes *c)
{
	struct ferry__objdir_opts opts = {0, 1, c ? count_change : NULL, c};
	struct ferry__objdir *od;

	ftest_assert_ok(ferry__objdir_create(&opts, &od));
	return od;
}

static struct ferry__objdir_info info_of(struct ferry_object_id *id, struct ferry_worker_id *owner,
					 struct ferry_node_id *owner_node)
{
	struct ferry__objdir_info info = {0};

	ferry_object_id_random(id);
	info.id = *id;
	info.owner_worker = *owner;
	info.owner_node = *owner_node;
	info.size_bytes = 100;
	return info;
}

static enum ferry_gcs_object_state state_of(struct ferry__objdir *od, struct ferry_object_id *id)
{
	const struct ferry__objdir_entry *e = ferry__objdir_get(od, id);

	ftest_assert_ptr_notnull(e);
	return e->state;
}

/* A pending object *@id of a random owner *@owner on a random node *@n1, added to @od, and a
 * second random node *@n2; returns what was added. */
static struct ferry__objdir_info add_pending(struct ferry__objdir *od, struct ferry_object_id *id,
					     struct ferry_worker_id *owner,
					     struct ferry_node_id *n1, struct ferry_node_id *n2)
{
	struct ferry__objdir_info info;

	ferry_worker_id_random(owner);
	ferry_node_id_random(n1);
	ferry_node_id_random(n2);
	info = info_of(id, owner, n1);
	ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);
	return info;
}

FTEST(locations_drive_the_state)
{
	struct changes c = {0};
	struct ferry__objdir *od = new_dir(&c);
	struct ferry_worker_id owner;
	struct ferry_node_id n1, n2;
	struct ferry_object_id id;
	struct ferry__objdir_info info;

	info = add_pending(od, &id, &owner, &n1, &n2);
	ftest_assert_errno(ferry__objdir_add(od, &info), -EEXIST);
	ftest_assert_int_eq(state_of(od, &id), FERRY_GCS_OBJECT_PENDING);
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 100, 7, NULL), 1);
	ftest_assert_uint_eq(ferry__objdir_get(od, &id)->metadata_bytes, 7);
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 0, 0, NULL), 0);
	ftest_assert_errno(ferry__objdir_add_location(od, &id, &n2, 99, 0, NULL), -EINVAL);
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n2, 0, 0, NULL), 1);
	ftest_assert_int_eq(state_of(od, &id), FERRY_GCS_OBJECT_AVAILABLE);
	ftest_assert_uint_eq(ferry__objdir_get(od, &id)->nlocations, 2);
	ftest_assert_int_eq(ferry__objdir_remove_location(od, &id, &n1), 1);
	ftest_assert_int_eq(ferry__objdir_remove_location(od, &id, &n1), 0);
	ftest_assert_int_eq(state_of(od, &id), FERRY_GCS_OBJECT_AVAILABLE);
	ftest_assert_ok(ferry__objdir_set_spilled(od, &id, "file:///spill/x"));
	ftest_assert_int_eq(ferry__objdir_remove_location(od, &id, &n2), 1);
	ftest_assert_int_eq(state_of(od, &id), FERRY_GCS_OBJECT_AVAILABLE); /* spilled copy */
	ftest_assert_ok(ferry__objdir_set_spilled(od, &id, NULL));
	ftest_assert_int_eq(state_of(od, &id), FERRY_GCS_OBJECT_LOST);
	/* A recomputed object comes back. */
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n2, 100, 0, NULL), 1);
	ftest_assert_int_eq(state_of(od, &id), FERRY_GCS_OBJECT_AVAILABLE);
	ftest_assert_int_eq(c.changed, 8);
	ftest_assert_ok(ferry__objdir_remove(od, &id));
	ftest_assert_int_eq(c.removed, 1);
	ftest_assert_errno(ferry__objdir_remove(od, &id), -ENOENT);
	ftest_assert_errno(ferry__objdir_add_location(od, &id, &n1, 0, 0, NULL), -ENOENT);
	/* The node index forgot the removed object's location. */
	ftest_assert_int_eq(ferry__objdir_node_died(od, &n2), 0);
	ferry__objdir_destroy(od);
}

/* The place of @id's copy on @node (that copy must exist). */
static struct ferry_gcs_object_place place_on(struct ferry__objdir *od, struct ferry_object_id *id,
					      struct ferry_node_id *node)
{
	const struct ferry__objdir_entry *e = ferry__objdir_get(od, id);

	ftest_assert_ptr_notnull(e);
	for (const struct ferry__objdir_loc *l = e->locations; l; l = l->obj_next)
		if (ferry_node_id_eq(&l->node, node))
			return l->place;
	FTEST__FAIL("no copy on that node");
}

static void assert_place(struct ferry_gcs_object_place got, uint64_t offset, uint64_t alloc,
			 uint64_t check)
{
	ftest_assert_uint_eq(got.offset, offset);
	ftest_assert_uint_eq(got.alloc, alloc);
	ftest_assert_uint_eq(got.check, check);
}

/* A copy's place: stored with a new copy; the same place again changes nothing; another known
 * place replaces it and counts (returned 1, reported) like an addition, even when only its check
 * differs; an unknown one (NULL, alloc 0, whatever its check) leaves it; a copy removed and
 * listed again without one does not get the old one. */
FTEST(add_location_records_and_updates_places)
{
	struct changes c = {0};
	struct ferry__objdir *od = new_dir(&c);
	struct ferry_gcs_object_place a = {4096, 7, 0xa7}, b = {8192, 9, 0xb9};
	struct ferry_gcs_object_place rechecked = {8192, 9, 0xb0}, no_alloc = {64, 0, 0x64};
	struct ferry_gcs_object_place places[2] = {{128, 3, 0x83}, {0, 0, 0}};
	struct ferry_node_id n1, n2, both[2];
	struct ferry_worker_id owner;
	struct ferry_object_id id, seeded;
	struct ferry__objdir_info info;

	info = add_pending(od, &id, &owner, &n1, &n2);
	c.changed = 0;
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 100, 0, &a), 1);
	assert_place(place_on(od, &id, &n1), 4096, 7, 0xa7);
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 100, 0, &a), 0);
	ftest_assert_int_eq(c.changed, 1);
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 100, 0, &b), 1);
	assert_place(place_on(od, &id, &n1), 8192, 9, 0xb9);
	ftest_assert_int_eq(c.changed, 2); /* subscribers hear of the new place */
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 100, 0, &rechecked), 1);
	assert_place(place_on(od, &id, &n1), 8192, 9, 0xb0);
	ftest_assert_int_eq(c.changed, 3); /* and of a new check alone */
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 0, 0, NULL), 0);
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 0, 0, &no_alloc), 0);
	assert_place(place_on(od, &id, &n1), 8192, 9, 0xb0);
	ftest_assert_int_eq(c.changed, 3);
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n2, 0, 0, &no_alloc), 1);
	assert_place(place_on(od, &id, &n2), 0, 0, 0);
	ftest_assert_uint_eq(ferry__objdir_get(od, &id)->nlocations, 2);
	ftest_assert_int_eq(ferry__objdir_remove_location(od, &id, &n1), 1);
	ftest_assert_int_eq(ferry__objdir_add_location(od, &id, &n1, 0, 0, NULL), 1);
	assert_place(place_on(od, &id, &n1), 0, 0, 0);
	/* Initial copies take their places, checks included, from the info. */
	both[0] = n1;
	both[1] = n2;
	info = info_of(&seeded, &owner, &n1);
	info.nlocations = 2;
	info.locations = both;
	info.places = places;
	ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);
	assert_place(place_on(od, &seeded, &n1), 128, 3, 0x83);
	assert_place(place_on(od, &seeded, &n2), 0, 0, 0);
	ferry__objdir_destroy(od);
}

FTEST(owner_death_marks_its_objects_lost)
{
	struct changes c = {0};
	struct ferry__objdir *od = new_dir(&c);
	struct ferry_worker_id dead, alive;
	struct ferry_node_id node;
	struct ferry_object_id mine[5], other;
	struct ferry__objdir_info info;

	ferry_worker_id_random(&dead);
	ferry_worker_id_random(&alive);
	ferry_node_id_random(&node);
	for (int i = 0; i < 5; i++) {
		info = info_of(&mine[i], &dead, &node);
		info.nlocations = 1;
		info.locations = &node;
		ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);
	}
	info = info_of(&other, &alive, &node);
	ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);
	c.changed = 0;
	ftest_assert_int_eq(ferry__objdir_owner_died(od, &dead), 5);
	ftest_assert_int_eq(ferry__objdir_owner_died(od, &dead), 0);
	ftest_assert_int_eq(c.changed, 5);
	for (int i = 0; i < 5; i++) {
		ftest_assert_int_eq(state_of(od, &mine[i]), FERRY_GCS_OBJECT_LOST);
		ftest_assert_true(ferry__objdir_get(od, &mine[i])->owner_dead);
	}
	ftest_assert_int_eq(state_of(od, &other), FERRY_GCS_OBJECT_PENDING);
	ftest_assert_errno(ferry__objdir_add_location(od, &mine[0], &node, 0, 0, NULL),
			   -EOWNERDEAD);
	ftest_assert_errno(ferry__objdir_set_spilled(od, &mine[0], "s3://x"), -EOWNERDEAD);
	ferry__objdir_destroy(od);
}

FTEST(node_death_drops_its_locations)
{
	struct changes c = {0};
	struct ferry__objdir *od = new_dir(&c);
	struct ferry_worker_id owner_far, owner_on_dead;
	struct ferry_node_id dead, far, both[2];
	struct ferry_object_id only_dead, two_copies, spilled, owned_on_dead;
	struct ferry__objdir_info info;

	ferry_worker_id_random(&owner_far);
	ferry_worker_id_random(&owner_on_dead);
	ferry_node_id_random(&dead);
	ferry_node_id_random(&far);
	both[0] = dead;
	both[1] = far;
	info = info_of(&only_dead, &owner_far, &far);
	info.nlocations = 1;
	info.locations = &dead;
	ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);
	info = info_of(&two_copies, &owner_far, &far);
	info.nlocations = 2;
	info.locations = both;
	ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);
	info = info_of(&spilled, &owner_far, &far);
	info.nlocations = 1;
	info.locations = &dead;
	info.spill_url = "file:///s";
	ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);
	info = info_of(&owned_on_dead, &owner_on_dead, &dead);
	info.nlocations = 1;
	info.locations = &far;
	ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);

	ftest_assert_int_eq(ferry__objdir_node_died(od, &dead), 4);
	ftest_assert_int_eq(state_of(od, &only_dead), FERRY_GCS_OBJECT_LOST);
	ftest_assert_int_eq(state_of(od, &two_copies), FERRY_GCS_OBJECT_AVAILABLE);
	ftest_assert_uint_eq(ferry__objdir_get(od, &two_copies)->nlocations, 1);
	ftest_assert_true(
		ferry_node_id_eq(&ferry__objdir_get(od, &two_copies)->locations->node, &far));
	ftest_assert_int_eq(state_of(od, &spilled), FERRY_GCS_OBJECT_AVAILABLE);
	ftest_assert_int_eq(state_of(od, &owned_on_dead), FERRY_GCS_OBJECT_LOST);
	ftest_assert_true(ferry__objdir_get(od, &owned_on_dead)->owner_dead);
	ftest_assert_int_eq(ferry__objdir_node_died(od, &dead), 0);
	ferry__objdir_destroy(od);
}

FTEST(bad_input_is_refused)
{
	struct ferry__objdir *od = new_dir(NULL);
	struct ferry_worker_id owner = {{0}};
	struct ferry_node_id node = {{9}}, twice[2];
	struct ferry_object_id id;
	struct ferry__objdir_info info = info_of(&id, &owner, &node);
	static char long_url[FERRY__OBJDIR_MAX_URL + 2];

	ferry__objdir_set_changed(od, NULL, NULL);
	ftest_assert_errno(ferry__objdir_add(od, &info), -EINVAL); /* nil owner */
	ferry_worker_id_random(&info.owner_worker);
	ferry_node_id_random(&twice[0]);
	twice[1] = twice[0];
	info.nlocations = 2;
	info.locations = twice;
	ftest_assert_errno(ferry__objdir_add(od, &info), -EINVAL);
	info.nlocations = 0;
	memset(long_url, 'u', sizeof(long_url) - 1);
	info.spill_url = long_url;
	ftest_assert_errno(ferry__objdir_add(od, &info), -EINVAL);
	info.spill_url = NULL;
	ftest_assert_int_eq(ferry__objdir_add(od, &info), 1);
	ftest_assert_errno(ferry__objdir_set_spilled(od, &id, long_url), -E2BIG);
	info.state = 9;
	ferry_object_id_random(&info.id);
	ftest_assert_errno(ferry__objdir_restore(od, &info), -EINVAL);
	ferry__objdir_destroy(od);
}

/* The routing rule: shard = ferry_id_hash(id) % n; a shard refuses the others' objects. */
FTEST(two_shards_split_the_directory)
{
	struct ferry__objdir_opts opts[2] = {{0, 2, NULL, NULL}, {1, 2, NULL, NULL}};
	struct ferry__objdir *shard[2];
	struct ferry_worker_id owner;
	struct ferry_node_id node;
	int per_shard[2] = {0, 0};

	ferry_worker_id_random(&owner);
	ferry_node_id_random(&node);
	for (int i = 0; i < 2; i++)
		ftest_assert_ok(ferry__objdir_create(&opts[i], &shard[i]));
	for (int i = 0; i < 200; i++) {
		struct ferry_object_id id;
		struct ferry__objdir_info info = info_of(&id, &owner, &node);
		uint32_t s = ferry_gcs_object_shard(&id, 2);

		ftest_assert_uint_eq(s, ferry_id_hash(id.bytes, sizeof(id.bytes)) % 2);
		ftest_assert_int_eq(ferry__objdir_add(shard[s], &info), 1);
		ftest_assert_errno(ferry__objdir_add(shard[1 - s], &info), -EXDEV);
		per_shard[s]++;
	}
	ftest_assert_uint_eq(ferry__objdir_count(shard[0]), (size_t)per_shard[0]);
	ftest_assert_int_gt(per_shard[0], 50); /* the hash spreads: 200 coin flips */
	ftest_assert_int_gt(per_shard[1], 50);
	ftest_assert_uint_eq(ferry_gcs_object_shard(&(struct ferry_object_id){{1}}, 0), 0);
	opts[0].shard_index = 2;
	ftest_assert_errno(ferry__objdir_create(&opts[0], &shard[0]), -EINVAL);
	ferry__objdir_destroy(shard[0]);
	ferry__objdir_destroy(shard[1]);
}

/* Every allocation of add (with locations) and add_location fails in turn: the directory is
 * left as it was, and the leak check at the end of the test sees nothing live. */
FTEST(allocation_failures_change_nothing)
{
	struct ferry__objdir *od = new_dir(NULL);
	struct ferry_worker_id owner;
	struct ferry_node_id nodes[3], extra;
	struct ferry_object_id id;
	int failures = 0;

	ferry_worker_id_random(&owner);
	for (int i = 0; i < 3; i++)
		ferry_node_id_random(&nodes[i]);
	ferry_node_id_random(&extra);
	for (long n = 0;; n++) {
		struct ferry__objdir_info info = info_of(&id, &owner, &nodes[0]);
		int ret;

		info.nlocations = 3;
		info.locations = nodes;
		info.spill_url = "file:///x";
		ferry__alloc_fail_after(n);
		ret = ferry__objdir_add(od, &info);
		ferry__alloc_fail_after(-1);
		if (ret == 1)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		ftest_assert_ptr_null(ferry__objdir_get(od, &id));
		ftest_assert_uint_eq(ferry__objdir_count(od), 0);
		failures++;
	}
	ftest_assert_int_ge(failures, 8);
	for (long n = 0;; n++) {
		int ret;

		ferry__alloc_fail_after(n);
		ret = ferry__objdir_add_location(od, &id, &extra, 0, 0, NULL);
		ferry__alloc_fail_after(-1);
		if (ret == 1)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		ftest_assert_uint_eq(ferry__objdir_get(od, &id)->nlocations, 3);
	}
	ftest_assert_int_eq(ferry__objdir_node_died(od, &extra), 1);
	ftest_assert_uint_eq(ferry__objdir_get(od, &id)->nlocations, 3);
	ferry__objdir_destroy(od);
}
