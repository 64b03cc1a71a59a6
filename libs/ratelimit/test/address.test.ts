import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { addressKey, formatIPv6 } from '../src/index.ts';

/** WHATWG URL serialises IPv6 hosts in RFC 5952 form: an independent oracle. */
function urlCanonical(hextets: readonly number[]): string {
  const host = new URL(`http://[${hextets.map((h) => h.toString(16)).join(':')}]/`).hostname;
  return host.slice(1, -1);
}

const hextet = fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 0xffff }));
const prefixArb = fc.tuple(hextet, hextet, hextet, hextet);
const ifaceArb = fc.tuple(hextet, hextet, hextet, hextet);

/** Writes 8 hextets in one of several valid textual forms. */
function render(h: readonly number[], style: number): string {
  switch (style % 4) {
    case 0:
      return h.map((x) => x.toString(16).padStart(4, '0')).join(':');
    case 1:
      return h.map((x) => x.toString(16).toUpperCase()).join(':');
    case 2:
      return urlCanonical(h);
    default: {
      // Last 32 bits as a dotted quad.
      const v4 = `${h[6]! >> 8}.${h[6]! & 0xff}.${h[7]! >> 8}.${h[7]! & 0xff}`;
      return `${h
        .slice(0, 6)
        .map((x) => x.toString(16))
        .join(':')}:${v4}`;
    }
  }
}

const isMappedPrefix = (p: readonly number[]): boolean => p.every((x) => x === 0);

void test('address key - examples', () => {
  const cases: Array<[string, string]> = [
    ['1.2.3.4', '1.2.3.4'],
    ['255.255.255.255', '255.255.255.255'],
    ['::ffff:1.2.3.4', '1.2.3.4'],
    ['::FFFF:10.0.0.1', '10.0.0.1'],
    ['::ffff:102:304', '1.2.3.4'],
    ['0:0:0:0:0:ffff:c0a8:0101', '192.168.1.1'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:0DB8:0001:0002:ffff::1', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8::/64'],
    ['2001:db8:0:1::', '2001:db8:0:1::/64'],
    ['1:0:0:2::9', '1:0:0:2::/64'],
    ['::1', '::/64'],
    ['::', '::/64'],
    ['::1.2.3.4', '::/64'],
    ['64:ff9b::8.8.8.8', '64:ff9b::/64'],
    ['fe80::1%eth0', 'fe80::/64'],
  ];
  for (const [ip, key] of cases) assert.equal(addressKey(ip), key, ip);
});

void test('address key - non-IP input throws TypeError', () => {
  const bad: unknown[] = [
    '',
    'abc',
    '1.2.3',
    '256.1.1.1',
    '01.2.3.4',
    ' 1.2.3.4',
    '1.2.3.4 ',
    '1.2.3.4/24',
    '1.2.3.4:80',
    '[::1]',
    'gggg::',
    '1::2::3',
    '::ffff:1.2.3.4.5',
    '2001:db8::/64',
    undefined,
    null,
    1234,
  ];
  for (const ip of bad) assert.throws(() => addressKey(ip as string), TypeError, String(ip));
});

void test('address key - formatIPv6 agrees with the WHATWG URL serialiser (RFC 5952)', () => {
  fc.assert(
    fc.property(fc.array(hextet, { minLength: 8, maxLength: 8 }), (h) => {
      assert.equal(formatIPv6(h), urlCanonical(h));
    }),
    { numRuns: 2_000 },
  );
});

void test('address key - property: every address of one /64, in any spelling, maps to one key', () => {
  fc.assert(
    fc.property(prefixArb, ifaceArb, ifaceArb, fc.nat(), fc.nat(), (prefix, i1, i2, s1, s2) => {
      fc.pre(!isMappedPrefix(prefix));
      const k1 = addressKey(render([...prefix, ...i1], s1));
      const k2 = addressKey(render([...prefix, ...i2], s2));
      assert.equal(k1, k2);
      assert.equal(k1, `${urlCanonical([...prefix, 0, 0, 0, 0])}/64`);
    }),
    { numRuns: 2_000 },
  );
});

void test('address key - property: different /64 prefixes map to different keys', () => {
  fc.assert(
    fc.property(prefixArb, prefixArb, ifaceArb, ifaceArb, fc.nat(), (p1, p2, i1, i2, style) => {
      fc.pre(!isMappedPrefix(p1) && !isMappedPrefix(p2));
      fc.pre(p1.some((x, i) => x !== p2[i]));
      assert.notEqual(addressKey(render([...p1, ...i1], style)), addressKey(render([...p2, ...i2], style + 1)));
    }),
    { numRuns: 2_000 },
  );
});

void test('address key - property: IPv4 and its mapped IPv6 form share one key', () => {
  fc.assert(
    fc.property(fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)), ([a, b, c, d]) => {
      const v4 = `${a}.${b}.${c}.${d}`;
      assert.equal(addressKey(v4), v4);
      assert.equal(addressKey(`::ffff:${v4}`), v4);
      assert.equal(addressKey(`::ffff:${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`), v4);
    }),
  );
});
