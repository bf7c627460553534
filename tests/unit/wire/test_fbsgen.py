#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fbsgen refuses every schema feature it does not implement, with file:line and a reason,
and accepts the supported subset. Usage: test_fbsgen.py path/to/fbsgen.py"""

import contextlib
import importlib.util
import io
import os
import sys
import tempfile

GOOD = '''
namespace t;
struct S { a: int; b: [ubyte:3]; }
enum E : ubyte { A, B = 3 }
table T { s: S; e: E = B; name: string (required); v: [T]; old: int (deprecated); }
enum MessageType : uint16 { T = 1 }
'''

# A struct-framed message: MessageType names a struct marked framed_struct (its payload is the
# struct's bytes, then raw bytes). The generated code must size it and verify it by length.
GOOD_FRAMED = '''
attribute "framed_struct";
namespace t;
struct Chunk (framed_struct) { xfer: ulong; offset: ulong; }
table T { x: int; }
enum MessageType : uint16 { T = 1, Chunk = 2 }
'''
GOOD_FRAMED_WANT = ['#define X_CHUNK_BYTES 16', 'int x_chunk_frame_verify(const void *buf',
                    '{X_MESSAGE_TYPE_CHUNK, "Chunk", x_chunk_frame_verify, 16}',
                    '{X_MESSAGE_TYPE_T, "T", x_t_verify, 0}']

FRAMED = 'attribute "framed_struct"; '

# (schema, text the error must contain)
BAD = [
    ('struct H { a: ulong; } table T { x: int; } enum MessageType : uint16 { T = 1, H = 2 }',
     'not marked (framed_struct)'),
    (FRAMED + 'struct H (framed_struct) { a: ulong; } table T { x: int; } '
     'enum MessageType : uint16 { T = 1 }', 'no MessageType names it'),
    (FRAMED + 'struct H (framed_struct) { a: ulong; }', 'there is no MessageType'),
    (FRAMED + 'struct H (framed_struct: "T") { a: ulong; } table T { x: int; } '
     'enum MessageType : uint16 { T = 1, H = 2 }', 'takes no value'),
    (FRAMED + 'table T (framed_struct) { x: int; }', "'framed_struct' is not allowed"),
    ('union U { T } table T { x: int; }', "'union' is not supported"),
    ('table T { x: int (id: 0); }', "attribute 'id' is not supported"),
    ('table T { x: [int] (nested_flatbuffer: "T"); }', "'nested_flatbuffer' is not supported"),
    ('table T { x: int (key); }', "attribute 'key' is not supported"),
    ('enum E : ubyte (bit_flags) { A, B }', "'bit_flags' is not supported"),
    ('struct S (force_align: 16) { x: int; }', "'force_align' is not supported"),
    ('file_identifier "ABCD";', "'file_identifier' is not supported"),
    ('rpc_service S { Get(T): T; }', "'rpc_service' is not supported"),
    ('table T { x: [[int]]; }', 'vectors of vectors'),
    ('table T { x: [int:3]; }', 'only allowed in structs'),
    ('struct S { x: string; }', 'a struct holds'),
    ('struct S { x: [bool:2]; }', 'arrays hold integer or float'),
    ('table T { x: int = 1.5; }', 'bad default'),
    ('table T { x: ubyte = 300; }', 'default out of range'),
    ('table T { x: double = nan; }', 'finite'),
    ('table T { x: int = null; }', 'bad default'),
    ('table T { x: int (required); }', 'only non-scalar fields can be required'),
    ('table T { s: string = "a"; }', 'bad default'),
    ('enum E : ubyte { A = 1 } table T { e: E; }', 'default 0 is not a value'),
    ('enum E : ubyte { B = 2, A = 1 }', 'values must ascend'),
    ('enum E : float { A }', 'integer type'),
    ('table T { delete: int; }', 'not usable in C and C++'),
    ('table T { x: U; }', "unknown type 'U'"),
    ('struct S { s: S; }', 'contains itself'),
    ('table T { t: T (required); }', 'form a cycle'),
    ('table T { v: [int]; v_count: int; }', 'generated twice'),
    ('table A { b_y: int; } table A_b { y: int; }', 'needed twice'),
    ('enum MessageType : uint16 { Nope = 1 }', 'does not name a table'),
    ('table T { x: int; } enum MessageType : ubyte { T = 1 }', 'must be a uint16 enum'),
    ('table T { x: int; } enum MessageType : uint16 { T = 0 }', 'reserved'),
    ('table T { x: int (priority); }', "unknown attribute 'priority'"),
    ('table T { x: int (c_type: "foo"); }', "'c_type' is not allowed"),
    ('include "missing.fbs";', 'cannot find include'),
    ('table T { x: int; ', "expected"),
]


class Result:
    def __init__(self, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr


def run(fbsgen, text, tmp):
    """Run fbsgen's main() in this process (one interpreter start for all cases)."""
    path = os.path.join(tmp, 'case.fbs')
    with open(path, 'w') as f:
        f.write('namespace t;\n' + text + '\n' if 'namespace' not in text else text)
    out = os.path.join(tmp, 'out')
    os.makedirs(out, exist_ok=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = fbsgen.main(['--prefix', 'x', '--name', 'x', '--out-dir', out, path])
    return Result(rc, err.getvalue())


def main():
    spec = importlib.util.spec_from_file_location('fbsgen', sys.argv[1])
    fbsgen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fbsgen)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        r = run(fbsgen, GOOD, tmp)
        if r.returncode != 0:
            print('FAIL: the supported subset was refused:', r.stderr)
            failures += 1
        r = run(fbsgen, GOOD_FRAMED, tmp)
        text = ''
        for name in ('x.h', 'x.c'):
            if r.returncode == 0:
                with open(os.path.join(tmp, 'out', name)) as f:
                    text += f.read()
        missing = [w for w in GOOD_FRAMED_WANT if w not in text]
        if r.returncode != 0 or missing:
            print('FAIL: framed_struct schema: rc=%d %s; missing %s' %
                  (r.returncode, r.stderr.strip(), missing))
            failures += 1
        else:
            print('ok: a framed_struct message is sized and verified by length')
        for text, want in BAD:
            r = run(fbsgen, text, tmp)
            ok = r.returncode != 0 and want in r.stderr and 'case.fbs:' in r.stderr
            if 'generated' in want or 'needed twice' in want or 'does not name' in want:
                ok = r.returncode != 0 and want in r.stderr
            if not ok:
                print('FAIL: %r: want an error containing %r, got rc=%d %s' %
                      (text, want, r.returncode, r.stderr.strip()))
                failures += 1
            else:
                print('ok: %s -> %s' % (text, r.stderr.strip().splitlines()[-1]))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
