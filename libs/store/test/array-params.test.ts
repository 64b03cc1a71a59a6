/** Array parameters (textArray, int8Array): what each engine receives is the array given, whatever its contents. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { textArray, int8Array, ArrayParam } from '../src/index.ts';
import { STORE_BACKENDS } from './backends.ts';

const TEXTS: ReadonlyArray<string | null> = [
  'plain',
  '',
  '{"a":"b\\"c","d":[1,2]}',
  'back\\slash and "quotes" and {braces}, commas',
  'NULL',
  ' leading and trailing ',
  'tab\tnewline\nreturn\r',
  'ünïcødé ✓ 😀 \u202E',
  null,
  'x'.repeat(70_000),
];

const INTS: ReadonlyArray<number | null> = [
  0,
  1,
  -1,
  2 ** 31,
  -(2 ** 31) - 1,
  2 ** 32,
  -(2 ** 32),
  Number.MAX_SAFE_INTEGER,
  Number.MIN_SAFE_INTEGER,
  null,
  42,
];

for (const backend of STORE_BACKENDS) {
  describe(`store - array parameters (${backend.name})`, () => {
    it('a text[] comes back element for element: quotes, backslashes, braces, the word NULL, a real null, unicode, 70 kB', async () => {
      const { stores, cleanup } = await backend.open();
      try {
        const { rows } = await stores[0]!.db.query<{ v: Array<string | null> }>('SELECT $1::text[] AS v', [textArray(TEXTS)]);
        assert.deepEqual(rows[0]!.v, TEXTS);
        const n = await stores[0]!.db.query<{ n: number; l: number }>(
          'SELECT count(*)::int AS n, sum(octet_length(t))::int AS l FROM unnest($1::text[]) AS t',
          [textArray(['a', 'é', '😀'])],
        );
        assert.deepEqual(n.rows[0], { n: 3, l: 1 + 2 + 4 }, 'lengths are UTF-8 bytes');
      } finally {
        for (const s of stores) await s.close();
        await cleanup();
      }
    });

    it('a bigint[] comes back exactly, negative and at the safe-integer limits; empty arrays are empty', async () => {
      const { stores, cleanup } = await backend.open();
      try {
        const db = stores[0]!.db;
        const { rows } = await db.query<{ v: Array<string | null> }>('SELECT $1::bigint[]::text[] AS v', [int8Array(INTS)]);
        assert.deepEqual(
          rows[0]!.v,
          INTS.map((v) => (v === null ? null : String(v))),
        );
        const e = await db.query<{ t: number; i: number }>('SELECT cardinality($1::text[]) AS t, cardinality($2::bigint[]) AS i', [
          textArray([]),
          int8Array([]),
        ]);
        assert.deepEqual(e.rows[0], { t: 0, i: 0 });
        const both = await db.query<{ id: string; n: string }>('SELECT * FROM unnest($1::text[], $2::bigint[]) AS u(id, n) ORDER BY id', [
          textArray(['b', 'a']),
          int8Array([2, 1]),
        ]);
        assert.deepEqual(
          both.rows.map((r) => [r.id, Number(r.n)]),
          [
            ['a', 1],
            ['b', 2],
          ],
        );
      } finally {
        for (const s of stores) await s.close();
        await cleanup();
      }
    });
  });
}

describe('store - array parameters: bad input', () => {
  it('a bigint[] element that is not a safe integer is refused before anything is sent', () => {
    for (const bad of [1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53])
      assert.throws(
        () => int8Array([1, bad]).binary(),
        (err: unknown) => err instanceof RangeError && /safe integer/.test(err.message),
        String(bad),
      );
  });

  it('the binary layout is Postgres’s: one dimension, the element type, each length before its bytes, -1 for null', () => {
    const b = textArray(['ab', null]).binary();
    assert.deepEqual(
      [b.readInt32BE(0), b.readInt32BE(4), b.readUInt32BE(8), b.readInt32BE(12), b.readInt32BE(16), b.readInt32BE(20)],
      [1, 1, 25, 2, 1, 2],
    );
    assert.equal(b.subarray(24, 26).toString(), 'ab');
    assert.equal(b.readInt32BE(26), -1);
    assert.equal(b.length, 30);
    const i = int8Array([-2]).binary();
    assert.equal(i.readUInt32BE(8), 20);
    assert.equal(i.readBigInt64BE(24), -2n);
    assert.ok(textArray([]) instanceof ArrayParam);
    assert.equal(textArray([]).binary().length, 12, 'an empty array is a header with no dimension');
  });
});
