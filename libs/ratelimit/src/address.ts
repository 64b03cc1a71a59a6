import { isIP } from 'node:net';

/**
 * The rate-limit key of a client address.
 *
 * - IPv4: the address as given (`isIP` accepts only canonical dotted quads).
 * - IPv4-mapped IPv6 (`::ffff:1.2.3.4`, also `::ffff:102:304`): the IPv4.
 * - Other IPv6: its /64 prefix in RFC 5952 canonical form, e.g.
 *   `2001:db8:1:2::/64`. One subscriber usually gets a whole /64 (RFC 6177),
 *   so keying by address would let one host rotate through 2^64 keys.
 *   A zone id (`fe80::1%eth0`) is ignored.
 *
 * @throws TypeError when `ip` is not an IPv4 or IPv6 address (`node:net` isIP).
 */
export function addressKey(ip: string): string {
  const family = typeof ip === 'string' ? isIP(ip) : 0;
  if (family === 4) return ip;
  if (family !== 6) throw new TypeError(`not an IP address: ${JSON.stringify(ip)}`);
  const h = parseIPv6(ip);
  if (h[0] === 0 && h[1] === 0 && h[2] === 0 && h[3] === 0 && h[4] === 0 && h[5] === 0xffff) {
    return `${h[6]! >> 8}.${h[6]! & 0xff}.${h[7]! >> 8}.${h[7]! & 0xff}`;
  }
  return `${formatIPv6([h[0]!, h[1]!, h[2]!, h[3]!, 0, 0, 0, 0])}/64`;
}

/** Parses an IPv6 address already validated by `isIP` into its 8 hextets (handles `::`, an IPv4 tail, a zone id). */
function parseIPv6(ip: string): number[] {
  let s = ip;
  const zone = s.indexOf('%');
  if (zone >= 0) s = s.slice(0, zone);
  const toHextets = (part: string): number[] => {
    if (part === '') return [];
    const out: number[] = [];
    for (const g of part.split(':')) {
      if (g.includes('.')) {
        const [a, b, c, d] = g.split('.').map(Number) as [number, number, number, number];
        out.push((a << 8) | b, (c << 8) | d);
      } else out.push(parseInt(g, 16));
    }
    return out;
  };
  const gap = s.indexOf('::');
  if (gap < 0) return toHextets(s);
  const head = toHextets(s.slice(0, gap));
  const tail = toHextets(s.slice(gap + 2));
  return [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
}

/**
 * RFC 5952 §4 text form of 8 hextets: lower-case hex without leading zeros,
 * the longest run of two or more zero hextets (the first one on a tie)
 * replaced by `::`.
 */
export function formatIPv6(hextets: readonly number[]): string {
  let bestStart = -1;
  let bestLen = 1; // a single zero hextet is never compressed (§4.2.2)
  for (let i = 0; i < hextets.length;) {
    if (hextets[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < hextets.length && hextets[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = hextets.map((x) => x.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}
