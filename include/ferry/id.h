/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixed-size binary identifiers (docs/architecture.md "Identifiers"): ObjectID is 20 bytes,
 * the others 16.
 * An object made by a task is named from the task's ID and its return index, so re-executing
 * the task recreates the same IDs (lineage reconstruction depends on it).
 *
 * Thread model: all functions are thread-safe; random generation uses a per-thread generator
 * seeded from getrandom(2) and reseeded after fork.
 */
#ifndef FERRY_ID_H
#define FERRY_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_OBJECT_ID_SIZE 20
#define FERRY_UNIQUE_ID_SIZE 16
/* Hex text of the longest ID plus the terminating NUL. */
#define FERRY_ID_HEX_MAX (2 * FERRY_OBJECT_ID_SIZE + 1)

struct ferry_object_id {
	uint8_t bytes[FERRY_OBJECT_ID_SIZE];
};
struct ferry_node_id {
	uint8_t bytes[FERRY_UNIQUE_ID_SIZE];
};
struct ferry_worker_id {
	uint8_t bytes[FERRY_UNIQUE_ID_SIZE];
};
struct ferry_job_id {
	uint8_t bytes[FERRY_UNIQUE_ID_SIZE];
};
struct ferry_actor_id {
	uint8_t bytes[FERRY_UNIQUE_ID_SIZE];
};
struct ferry_task_id {
	uint8_t bytes[FERRY_UNIQUE_ID_SIZE];
};

/*
 * Generic forms over (pointer, size); the typed forms below call them with sizeof(id->bytes).
 * ferry_id_random() fills @id with random bytes (never all zero: zero means "nil").
 * ferry_id_to_hex() writes 2*size lowercase hex digits + NUL into @out; returns the number of
 *   digits, or -ENOSPC if @out_size is too small.
 * ferry_id_from_hex() parses exactly 2*size hex digits (either case); -EINVAL otherwise.
 * ferry_id_hash() is a well-mixed 64-bit hash (for tables and shard routing: stable across
 *   processes and runs).
 */
FERRY_API void ferry_id_random(void *id, size_t size);
FERRY_API int ferry_id_to_hex(const void *id, size_t size, char *out, size_t out_size);
FERRY_API int ferry_id_from_hex(const char *hex, void *id, size_t size);
FERRY_API uint64_t ferry_id_hash(const void *id, size_t size);
FERRY_API bool ferry_id_is_nil(const void *id, size_t size);

/*
 * ferry_object_id_for_task() - the ID of return value @index (1-based) of task @task:
 * the 16 task bytes then @index little-endian. Index 0 is reserved.
 * ferry_object_id_for_put() - the ID of the @seq'th put by @task (a driver's or worker's
 * current task): as above with the top bit of the index set, so puts and returns never collide.
 */
FERRY_API void ferry_object_id_for_task(const struct ferry_task_id *task, uint32_t index,
					struct ferry_object_id *out);
FERRY_API void ferry_object_id_for_put(const struct ferry_task_id *task, uint32_t seq,
				       struct ferry_object_id *out);

#define FERRY__ID_FUNCS(type)                                                                     \
	static inline void ferry_##type##_id_random(struct ferry_##type##_id *id)                 \
	{                                                                                         \
		ferry_id_random(id->bytes, sizeof(id->bytes));                                    \
	}                                                                                         \
	static inline int ferry_##type##_id_to_hex(const struct ferry_##type##_id *id, char *out, \
						   size_t out_size)                               \
	{                                                                                         \
		return ferry_id_to_hex(id->bytes, sizeof(id->bytes), out, out_size);              \
	}                                                                                         \
	static inline int ferry_##type##_id_from_hex(const char *hex,                             \
						     struct ferry_##type##_id *id)                \
	{                                                                                         \
		return ferry_id_from_hex(hex, id->bytes, sizeof(id->bytes));                      \
	}                                                                                         \
	static inline uint64_t ferry_##type##_id_hash(const struct ferry_##type##_id *id)         \
	{                                                                                         \
		return ferry_id_hash(id->bytes, sizeof(id->bytes));                               \
	}                                                                                         \
	static inline int ferry_##type##_id_cmp(const struct ferry_##type##_id *a,                \
						const struct ferry_##type##_id *b)                \
	{                                                                                         \
		return __builtin_memcmp(a->bytes, b->bytes, sizeof(a->bytes));                    \
	}                                                                                         \
	static inline bool ferry_##type##_id_eq(const struct ferry_##type##_id *a,                \
						const struct ferry_##type##_id *b)                \
	{                                                                                         \
		return __builtin_memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;               \
	}

FERRY__ID_FUNCS(object)
FERRY__ID_FUNCS(node)
FERRY__ID_FUNCS(worker)
FERRY__ID_FUNCS(job)
FERRY__ID_FUNCS(actor)
FERRY__ID_FUNCS(task)

#ifdef __cplusplus
}
#endif
#endif
