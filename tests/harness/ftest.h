/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ftest: Ferry's small test harness.
 *
 *   FTEST(name) { ftest_assert_int_eq(1 + 1, 2); }
 *
 * Each FTEST runs in its own forked process (its own process group, killed afterwards with
 * anything it started) under a timeout. Asserts are typed and print both sides. A test may
 * ftest_skip("reason"): the reason is printed and the run exits 77 if nothing else ran.
 * After each test the harness checks that every Ferry allocation made during it was freed.
 *
 * Runner flags: --no-fork (run in-process, for gdb), --list, --timeout SECONDS, and test
 * names to run only those. FTEST_TIMEOUT sets the default timeout (30 s).
 */
#ifndef FERRY_FTEST_H
#define FERRY_FTEST_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <ferry/common.h>

#ifdef __cplusplus
extern "C" {
#endif

void ftest__register(const char *name, void (*fn)(void), const char *file);
__attribute__((noreturn, format(printf, 3, 4))) void ftest__fail(const char *file, int line,
								 const char *fmt, ...);
__attribute__((noreturn, format(printf, 1, 2))) void ftest_skip(const char *fmt, ...);
/* Printed under the test's name, for context a reader needs (figures, seeds). */
__attribute__((format(printf, 1, 2))) void ftest_log(const char *fmt, ...);
/* Opt this test out of the automatic leak check (it hands memory to a global on purpose). */
void ftest_allow_leaks(void);
/* A fresh empty directory for this test, removed after it: "/tmp/ftest-XXXXXX". */
const char *ftest_tmpdir(void);
/* Entries of directory @path without "." and ".." (a /proc/self/fd count includes the
 * descriptor this call opens to read it); -1 if it cannot be opened. */
int ftest_count_entries(const char *path);
/* The runtime's tests: ferry_init() a local cluster in this process (a 64 MiB store,
 * @num_workers workers) running $FERRY_TEST_JOB, or join @address; skips when meson test did
 * not set FERRY_TEST_JOB and FERRY_WORKER_EXE. */
void ftest_runtime_init(const char *address, uint32_t num_workers);
/* Get the int64 that @ref holds (waiting up to @timeout_ms) into *@x and drop @ref: 0, or the
 * get's -errno with its error text logged and copied to @error (NULL: not copied). */
struct ferry_ref;
int ftest_get_int64(struct ferry_ref *ref, int64_t timeout_ms, int64_t *x, char *error,
		    size_t size);
/* Capture Ferry's log lines ("component: message\n" each, the first 8 KiB) from now until
 * ftest_log_capture_stop(); ftest_log_captured() is a copy of what came so far, valid until its
 * next call. Thread-safe: the daemons' threads log while the test reads. */
void ftest_log_capture_start(void);
void ftest_log_capture_stop(void);
const char *ftest_log_captured(void);

/* Write all @size bytes of @buf to @fd (a blocking socket or pipe), resuming short writes; a
 * write that fails or writes nothing fails the test at the caller's line. */
#define ftest_write_all(fd, buf, size) ftest__write_all(__FILE__, __LINE__, fd, buf, size)
void ftest__write_all(const char *file, int line, int fd, const void *buf, size_t size);

#define FTEST(name)                                                      \
	static void name(void);                                          \
	__attribute__((constructor)) static void ftest__reg_##name(void) \
	{                                                                \
		ftest__register(#name, name, __FILE__);                  \
	}                                                                \
	static void name(void)

#define FTEST__FAIL(...) ftest__fail(__FILE__, __LINE__, __VA_ARGS__)

#define ftest_assert_true(cond)                                  \
	do {                                                     \
		if (!(cond))                                     \
			FTEST__FAIL("expected true: %s", #cond); \
	} while (0)
#define ftest_assert_false(cond)                                  \
	do {                                                      \
		if (cond)                                         \
			FTEST__FAIL("expected false: %s", #cond); \
	} while (0)

#define FTEST__CMP_INT(a, op, b)                                                                \
	do {                                                                                    \
		long long ftest_a_ = (long long)(a), ftest_b_ = (long long)(b);                 \
		if (!(ftest_a_ op ftest_b_))                                                    \
			FTEST__FAIL("%s %s %s: %lld vs %lld", #a, #op, #b, ftest_a_, ftest_b_); \
	} while (0)
#define ftest_assert_int_eq(a, b) FTEST__CMP_INT(a, ==, b)
#define ftest_assert_int_ne(a, b) FTEST__CMP_INT(a, !=, b)
#define ftest_assert_int_lt(a, b) FTEST__CMP_INT(a, <, b)
#define ftest_assert_int_le(a, b) FTEST__CMP_INT(a, <=, b)
#define ftest_assert_int_gt(a, b) FTEST__CMP_INT(a, >, b)
#define ftest_assert_int_ge(a, b) FTEST__CMP_INT(a, >=, b)

#define FTEST__CMP_UINT(a, op, b)                                                               \
	do {                                                                                    \
		unsigned long long ftest_a_ = (unsigned long long)(a);                          \
		unsigned long long ftest_b_ = (unsigned long long)(b);                          \
		if (!(ftest_a_ op ftest_b_))                                                    \
			FTEST__FAIL("%s %s %s: %llu vs %llu", #a, #op, #b, ftest_a_, ftest_b_); \
	} while (0)
#define ftest_assert_uint_eq(a, b) FTEST__CMP_UINT(a, ==, b)
#define ftest_assert_uint_ne(a, b) FTEST__CMP_UINT(a, !=, b)
#define ftest_assert_uint_lt(a, b) FTEST__CMP_UINT(a, <, b)
#define ftest_assert_uint_le(a, b) FTEST__CMP_UINT(a, <=, b)
#define ftest_assert_uint_gt(a, b) FTEST__CMP_UINT(a, >, b)
#define ftest_assert_uint_ge(a, b) FTEST__CMP_UINT(a, >=, b)

#define ftest_assert_ptr_eq(a, b)                                                      \
	do {                                                                           \
		const void *ftest_a_ = (a), *ftest_b_ = (b);                           \
		if (ftest_a_ != ftest_b_)                                              \
			FTEST__FAIL("%s == %s: %p vs %p", #a, #b, ftest_a_, ftest_b_); \
	} while (0)
#define ftest_assert_ptr_null(a) ftest_assert_ptr_eq(a, NULL)
#define ftest_assert_ptr_notnull(a)                    \
	do {                                           \
		if ((a) == NULL)                       \
			FTEST__FAIL("%s is NULL", #a); \
	} while (0)

#define ftest_assert_str_eq(a, b)                                              \
	do {                                                                   \
		const char *ftest_a_ = (a), *ftest_b_ = (b);                   \
		if (!ftest_a_ || !ftest_b_ || strcmp(ftest_a_, ftest_b_) != 0) \
			FTEST__FAIL("%s == %s: \"%s\" vs \"%s\"", #a, #b,      \
				    ftest_a_ ? ftest_a_ : "(null)",            \
				    ftest_b_ ? ftest_b_ : "(null)");           \
	} while (0)

/* Compare @n bytes; on mismatch print the first differing offset and both bytes. */
#define ftest_assert_mem_eq(a, b, n)                                                             \
	do {                                                                                     \
		const unsigned char *ftest_a_ = (const unsigned char *)(a);                      \
		const unsigned char *ftest_b_ = (const unsigned char *)(b);                      \
		size_t ftest_n_ = (n);                                                           \
		for (size_t ftest_i_ = 0; ftest_i_ < ftest_n_; ftest_i_++)                       \
			if (ftest_a_[ftest_i_] != ftest_b_[ftest_i_])                            \
				FTEST__FAIL("%s == %s over %zu bytes: first difference at %zu: " \
					    "0x%02x vs 0x%02x",                                  \
					    #a, #b, ftest_n_, ftest_i_, ftest_a_[ftest_i_],      \
					    ftest_b_[ftest_i_]);                                 \
	} while (0)

/* @ret must be the negative errno @expected (e.g. -ENOENT); prints both as text. */
#define ftest_assert_errno(ret, expected)                                                    \
	do {                                                                                 \
		long long ftest_r_ = (long long)(ret), ftest_e_ = (long long)(expected);     \
		if (ftest_r_ != ftest_e_)                                                    \
			FTEST__FAIL("%s: got %lld (%s), expected %lld (%s)", #ret, ftest_r_, \
				    ferry_strerror((int)ftest_r_), ftest_e_,                 \
				    ferry_strerror((int)ftest_e_));                          \
	} while (0)

/* @ret must be >= 0 (success or a count). */
#define ftest_assert_ok(ret)                                                \
	do {                                                                \
		long long ftest_r_ = (long long)(ret);                      \
		if (ftest_r_ < 0)                                           \
			FTEST__FAIL("%s failed: %lld (%s)", #ret, ftest_r_, \
				    ferry_strerror((int)ftest_r_));         \
	} while (0)

#ifdef __cplusplus
}
#endif
#endif
