/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GCS record helpers shared by the tables and the mutation codec: field validation (bad input
 * gets -EINVAL and a log line naming the field) and one-allocation copies.
 *
 * Thread model: pure functions.
 */
#ifndef FERRY_GCS_RECORDS_H
#define FERRY_GCS_RECORDS_H

#include <stdbool.h>
#include <stddef.h>

#include "gcs/tables.h"

/* ferry__gcs_text_check() - @s (NULL = absent) is at most @max bytes, and present if
 * @required. 0 or -EINVAL (logged with @what). */
int ferry__gcs_text_check(const char *s, size_t max, bool required, const char *what);
/* ferry__gcs_amount_ok() - a resource amount: finite and >= 0. */
bool ferry__gcs_amount_ok(double v);
bool ferry__gcs_exit_ok(enum ferry_gcs_exit x);

/* Whole-record checks: IDs not nil, enums known, strings and arrays within the limits of
 * tables.h. 0 or -EINVAL (logged). */
int ferry__gcs_node_check(const struct ferry__gcs_node *n);
int ferry__gcs_job_check(const struct ferry__gcs_job *j);
int ferry__gcs_worker_check(const struct ferry_gcs_worker_info *w);
int ferry__gcs_actor_check(const struct ferry_gcs_actor_info *a);
int ferry__gcs_pg_check(const struct ferry__gcs_pg *g);
/* A load report: nil ID, more than FERRY_GCS_MAX_LOAD_RESOURCES, a name missing, too long or
 * twice, a negative amount: -EINVAL (logged). */
int ferry__gcs_load_check(const struct ferry_gcs_node_load *l);

/*
 * Copies in one ferry__malloc'd block (free with ferry__free), or NULL on -ENOMEM. Empty strings
 * become NULL. The placement group copy takes its bundles' nodes from @nodes (one per bundle)
 * when not NULL, or makes them nil when @clear_nodes.
 */
struct ferry__gcs_node *ferry__gcs_node_clone(const struct ferry__gcs_node *n);
struct ferry__gcs_job *ferry__gcs_job_clone(const struct ferry__gcs_job *j);
struct ferry_gcs_worker_info *ferry__gcs_worker_clone(const struct ferry_gcs_worker_info *w);
struct ferry_gcs_actor_info *ferry__gcs_actor_clone(const struct ferry_gcs_actor_info *a);
struct ferry__gcs_pg *ferry__gcs_pg_clone(const struct ferry__gcs_pg *g,
					  const struct ferry_node_id *nodes, bool clear_nodes);
struct ferry__gcs_error *ferry__gcs_error_clone(const struct ferry__gcs_error *e);

#endif
