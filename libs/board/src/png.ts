/**
 * PNG encoding for boards. @napi-rs/canvas 1.1.1's `encode('png')` takes no
 * compression options (only metadata): on a 40-card board it spends ~32 ms
 * and writes ~108 KB (RGBA, every filter tried on every row, zlib level 6).
 * A board is flat colour plus anti-aliased text and a few small avatars, so
 * it is written here as an **indexed** PNG (colour type 3, one byte a pixel):
 * ≤ 256 distinct colours are kept exactly; past that the most frequent
 * colours are kept exactly and the rest (avatar photos, emoji, rare
 * anti-aliasing shades) share the remaining palette entries by median cut.
 * Measured on the 40-card sample board: ~45 KB in ~15 ms (docs/board.md).
 * Telegram re-encodes every photo as JPEG anyway, so the rare colours'
 * rounding never shows. An 8-bit RGB encoder (`mode: 'rgb'`) stays for
 * comparison in the bench.
 */
import { crc32, deflateSync, constants as zc } from 'node:zlib';

/** PNG row filters (PNG spec §9.2). `paeth` predicts from left, up and up-left. */
export type PngFilter = 'none' | 'sub' | 'up' | 'paeth';

/** Encoder options. */
export interface PngOptions {
  /** `indexed` (palette, default) or `rgb` (8-bit truecolour, lossless). */
  readonly mode?: 'indexed' | 'rgb';
  /** zlib level 0–9 (default 6). */
  readonly level?: number;
  /** zlib strategy (default `default`). */
  readonly strategy?: 'default' | 'filtered' | 'rle' | 'huffman';
  /** Row filter for every row (default: `none` for indexed, `up` for rgb). */
  readonly filter?: PngFilter;
  /** Indexed mode: palette entries kept for the most frequent exact colours when there are more than 256 (default 128; the rest is median cut). */
  readonly exactColours?: number;
}

/** The encoder settings the renderer uses (chosen with `npm run bench -- render --explore`; docs/board.md). */
export const BOARD_PNG_OPTIONS = { mode: 'indexed', level: 6, strategy: 'default', exactColours: 128 } as const satisfies PngOptions;

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const FILTER_CODE: Record<PngFilter, number> = { none: 0, sub: 1, up: 2, paeth: 4 };
const STRATEGY: Record<NonNullable<PngOptions['strategy']>, number> = {
  default: zc.Z_DEFAULT_STRATEGY,
  filtered: zc.Z_FILTERED,
  rle: zc.Z_RLE,
  huffman: zc.Z_HUFFMAN_ONLY,
};

function paeth(a: number, b: number, c: number): number {
  const p = a + b - c;
  const pa = Math.abs(p - a);
  const pb = Math.abs(p - b);
  const pc = Math.abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/**
 * Filters `rows` rows of `stride` bytes (`bpp` bytes a pixel) into PNG
 * scanlines, each prefixed by its filter byte.
 */
function filterRows(raw: Uint8Array, stride: number, rows: number, bpp: number, filter: PngFilter): Buffer {
  const out = Buffer.allocUnsafe((stride + 1) * rows);
  const code = FILTER_CODE[filter];
  for (let y = 0; y < rows; y++) {
    const r = y * stride;
    const o = y * (stride + 1) + 1;
    out[o - 1] = code;
    if (filter === 'none' || (filter === 'up' && y === 0)) {
      out.set(raw.subarray(r, r + stride), o); // `up` of row 0 subtracts a zero row
      continue;
    }
    const p = r - stride; // previous row (y > 0)
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? raw[r + x - bpp]! : 0;
      const b = y > 0 ? raw[p + x]! : 0;
      const c = x >= bpp && y > 0 ? raw[p + x - bpp]! : 0;
      const pred = filter === 'sub' ? a : filter === 'up' ? b : paeth(a, b, c);
      out[o + x] = (raw[r + x]! - pred) & 0xff;
    }
  }
  return out;
}

function chunk(type: string, data: Uint8Array): Buffer {
  const head = Buffer.allocUnsafe(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.allocUnsafe(4);
  crc.writeUInt32BE(crc32(data, crc32(head.subarray(4))), 0);
  return Buffer.concat([head, data, crc]);
}

/** Concatenates into a buffer that owns its whole ArrayBuffer (never a slice of Node's pool): transferable without a copy. */
function own(parts: readonly Uint8Array[]): Buffer {
  const out = Buffer.allocUnsafeSlow(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** A palette image: `indices[i]` is pixel i's entry in `palette` (RGB triplets). */
export interface Quantized {
  /** RGB triplets, `size` of them. */
  readonly palette: Uint8Array;
  readonly size: number;
  readonly indices: Uint8Array;
  /** Distinct colours in the input. */
  readonly unique: number;
  /** True when every pixel kept its exact colour (unique ≤ 256). */
  readonly exact: boolean;
}

const R = (c: number): number => c & 0xff;
const Gc = (c: number): number => (c >>> 8) & 0xff;
const B = (c: number): number => (c >>> 16) & 0xff;
const hash = (c: number): number => Math.imul(c ^ (c >>> 15), 0x9e3779b1) >>> 0;

/**
 * Open-addressing colour table: colour (RGBA as uint32) → slot, with pixel
 * counts. Slot 0 of `keys` never holds colour 0 by accident: `used` says.
 */
interface ColourTable {
  keys: Uint32Array;
  counts: Float64Array;
  used: Uint8Array;
  size: number;
}

function newTable(capacity: number): ColourTable {
  return { keys: new Uint32Array(capacity), counts: new Float64Array(capacity), used: new Uint8Array(capacity), size: 0 };
}

function findSlot(t: ColourTable, c: number): number {
  const mask = t.keys.length - 1;
  let h = hash(c) & mask;
  while (t.used[h] === 1 && t.keys[h] !== c) h = (h + 1) & mask;
  return h;
}

function addCount(t: ColourTable, c: number, n: number): ColourTable {
  if ((t.size + 1) * 2 > t.keys.length) {
    const g = newTable(t.keys.length * 2);
    for (let i = 0; i < t.keys.length; i++) {
      if (t.used[i] === 0) continue;
      const h = findSlot(g, t.keys[i]!);
      g.used[h] = 1;
      g.keys[h] = t.keys[i]!;
      g.counts[h] = t.counts[i]!;
    }
    g.size = t.size;
    t = g;
  }
  const h = findSlot(t, c);
  if (t.used[h] === 0) {
    t.used[h] = 1;
    t.keys[h] = c;
    t.size++;
  }
  t.counts[h] = t.counts[h]! + n;
  return t;
}

/**
 * Reduces opaque RGBA pixels to at most 256 colours. Exact when the image
 * has ≤ 256 distinct colours; otherwise the `exactColours` most frequent
 * colours (of those covering ≥ 16 pixels and ≥ 1/20,000 of the image) are
 * kept exactly and the others are median-cut (weighted by pixel count) into
 * the remaining entries: each such colour becomes the mean of its box.
 * @param rgba n × 4 bytes (alpha ignored: the canvas is opaque)
 */
export function quantize(rgba: Uint8Array, n: number, exactColours: number = BOARD_PNG_OPTIONS.exactColours): Quantized {
  const indices = new Uint8Array(n);
  const q = quantizeInto(rgba, n, 1, exactColours, indices, n, 0);
  return { ...q, indices };
}

/**
 * quantize(), writing the indices as rows of `width` bytes into `out`, row y
 * at `y × outStride + outOffset` (so PNG scanlines with their filter byte
 * can be written in place).
 */
function quantizeInto(
  rgba: Uint8Array,
  width: number,
  height: number,
  exactColours: number,
  out: Uint8Array,
  outStride: number,
  outOffset: number,
): Omit<Quantized, 'indices'> {
  const n = width * height;
  if (rgba.byteOffset % 4 !== 0) rgba = Uint8Array.from(rgba);
  const px = new Uint32Array(rgba.buffer, rgba.byteOffset, n);
  let table = newTable(1 << 14);
  // Histogram by runs: most pixels repeat their left neighbour.
  let prev = px[0]!;
  let run = 0;
  for (let i = 0; i < n; i++) {
    const c = px[i]!;
    if (c === prev) run++;
    else {
      table = addCount(table, prev, run);
      prev = c;
      run = 1;
    }
  }
  if (run > 0) table = addCount(table, prev, run);
  const { keys, counts, used } = table;
  // Slots by descending count (ties: higher slot first), through one native numeric sort of count·2^23 + slot
  // (exact in a double: counts < 2^30, slots < 2^23).
  const order = new Float64Array(table.size);
  for (let h = 0, j = 0; h < keys.length; h++) if (used[h] === 1) order[j++] = counts[h]! * 2 ** 23 + h;
  order.sort();
  const slots = new Int32Array(table.size);
  for (let j = 0; j < order.length; j++) slots[order.length - 1 - j] = order[j]! % 2 ** 23;
  const unique = slots.length;
  const exact = unique <= 256;
  const entries: number[] = []; // palette colours (uint32 RGBA)
  const index = new Uint8Array(keys.length); // slot → palette index
  // Past 256 colours, a colour is kept exactly only if it is frequent (≥ 16 pixels and ≥ 1/20,000 of the image):
  // the rest of the palette goes to the median cut.
  let keep = exact ? unique : Math.min(exactColours, 255);
  const frequent = Math.max(16, n / 20_000);
  if (!exact) while (keep > 0 && counts[slots[keep - 1]!]! < frequent) keep--;
  for (let i = 0; i < keep; i++) {
    index[slots[i]!] = i;
    entries.push(keys[slots[i]!]!);
  }
  if (!exact) {
    const rest = slots.subarray(keep);
    for (const [s, e] of medianCut(rest, table, 256 - keep)) {
      let r = 0;
      let g = 0;
      let b = 0;
      let w = 0;
      for (let i = s; i < e; i++) {
        const c = keys[rest[i]!]!;
        const k = counts[rest[i]!]!;
        r += R(c) * k;
        g += Gc(c) * k;
        b += B(c) * k;
        w += k;
      }
      for (let i = s; i < e; i++) index[rest[i]!] = entries.length;
      entries.push(((0xff << 24) | (Math.round(b / w) << 16) | (Math.round(g / w) << 8) | Math.round(r / w)) >>> 0);
    }
  }
  const mask = keys.length - 1;
  prev = px[0]! ^ 1;
  let pi = 0;
  for (let y = 0, i = 0; y < height; y++) {
    let o = y * outStride + outOffset;
    for (const end = i + width; i < end; i++) {
      const c = px[i]!;
      if (c !== prev) {
        let h = hash(c) & mask;
        while (keys[h] !== c) h = (h + 1) & mask;
        pi = index[h]!;
        prev = c;
      }
      out[o++] = pi;
    }
  }
  const palette = new Uint8Array(entries.length * 3);
  entries.forEach((e, i) => {
    palette[i * 3] = R(e);
    palette[i * 3 + 1] = Gc(e);
    palette[i * 3 + 2] = B(e);
  });
  return { palette, size: entries.length, unique, exact };
}

/** Splits `slots` (reordered in place) into at most `boxes` ranges [start, end) by weighted median cut. */
function medianCut(slots: Int32Array, table: ColourTable, boxes: number): Array<[number, number]> {
  const { keys, counts } = table;
  const out: Array<[number, number, number, number]> = []; // start, end, channel of widest range, score (−1: cannot split)
  const tmp = new Int32Array(slots.length);
  const measure = (s: number, e: number): [number, number, number, number] => {
    let w = 0;
    let r0 = 255;
    let r1 = 0;
    let g0 = 255;
    let g1 = 0;
    let b0 = 255;
    let b1 = 0;
    for (let i = s; i < e; i++) {
      const c = keys[slots[i]!]!;
      w += counts[slots[i]!]!;
      const r = R(c);
      const g = Gc(c);
      const b = B(c);
      if (r < r0) r0 = r;
      if (r > r1) r1 = r;
      if (g < g0) g0 = g;
      if (g > g1) g1 = g;
      if (b < b0) b0 = b;
      if (b > b1) b1 = b;
    }
    const ranges = [r1 - r0, g1 - g0, b1 - b0] as const;
    const ch = ranges[0] >= ranges[1] && ranges[0] >= ranges[2] ? 0 : ranges[1] >= ranges[2] ? 1 : 2;
    const range = ranges[ch];
    return [s, e, ch, e - s < 2 || range === 0 ? -1 : range * Math.sqrt(w)];
  };
  if (slots.length > 0) out.push(measure(0, slots.length));
  const cnt = new Int32Array(257);
  while (out.length < boxes) {
    let bi = -1;
    for (let i = 0; i < out.length; i++) if (out[i]![3] >= 0 && (bi < 0 || out[i]![3] > out[bi]![3])) bi = i;
    if (bi < 0) break;
    const [s, e, ch] = out[bi]!;
    // Counting sort of the box by the channel, then cut at the weighted median.
    cnt.fill(0);
    let total = 0;
    for (let i = s; i < e; i++) {
      const h = slots[i]!;
      cnt[((keys[h]! >>> (ch * 8)) & 0xff) + 1]!++;
      total += counts[h]!;
    }
    for (let v = 0; v < 256; v++) cnt[v + 1] = cnt[v + 1]! + cnt[v]!;
    for (let i = s; i < e; i++) {
      const h = slots[i]!;
      tmp[cnt[(keys[h]! >>> (ch * 8)) & 0xff]!++] = h;
    }
    slots.set(tmp.subarray(0, e - s), s);
    let acc = 0;
    let cut = s + 1;
    for (let i = s; i < e - 1; i++) {
      acc += counts[slots[i]!]!;
      cut = i + 1;
      if (acc * 2 >= total) break;
    }
    out.splice(bi, 1, measure(s, cut), measure(cut, e));
  }
  return out.map(([s, e]) => [s, e]);
}

/** Scratch for scanlines, reused by every encode on this thread (grown as needed). */
let scratch = new Uint8Array(0);
function scanlineBuffer(bytes: number): Uint8Array {
  if (scratch.length < bytes) scratch = new Uint8Array(Math.max(bytes, Math.ceil(scratch.length * 1.25)));
  return scratch.subarray(0, bytes);
}

/**
 * Encodes opaque RGBA pixels (e.g. `canvas.data()` of a canvas whose
 * background was filled opaque: premultiplied equals straight) as a PNG:
 * indexed (default) or 8-bit RGB. The result owns its whole ArrayBuffer
 * (offset 0), so it can be transferred to another thread without a copy.
 * @param rgba width × height × 4 bytes
 * @throws RangeError when the sizes disagree or an option is out of range
 */
export function encodePng(rgba: Uint8Array, width: number, height: number, opts: PngOptions = {}): Buffer {
  if (!Number.isInteger(width) || !Number.isInteger(height) || width < 1 || height < 1) {
    throw new RangeError(`bad size ${width}×${height}`);
  }
  if (rgba.length !== width * height * 4) throw new RangeError(`expected ${width * height * 4} bytes of RGBA, got ${rgba.length}`);
  const level = opts.level ?? BOARD_PNG_OPTIONS.level;
  if (!Number.isInteger(level) || level < 0 || level > 9) throw new RangeError(`zlib level must be 0–9, got ${level}`);
  const exactColours = opts.exactColours ?? BOARD_PNG_OPTIONS.exactColours;
  if (!Number.isInteger(exactColours) || exactColours < 0 || exactColours > 255) {
    throw new RangeError(`exactColours must be 0–255, got ${exactColours}`);
  }
  const mode = opts.mode ?? BOARD_PNG_OPTIONS.mode;
  const zopts = { level, strategy: STRATEGY[opts.strategy ?? BOARD_PNG_OPTIONS.strategy], memLevel: 9 };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth; [10] compression 0, [11] filter method 0, [12] no interlace
  if (mode === 'indexed') {
    ihdr[9] = 3; // colour type: palette
    const filter = opts.filter ?? 'none';
    let scan: Uint8Array;
    let q: Omit<Quantized, 'indices'>;
    if (filter === 'none') {
      // Indices straight into the scanlines (filter byte 0 before each row): no copy.
      scan = scanlineBuffer((width + 1) * height);
      for (let y = 0; y < height; y++) scan[y * (width + 1)] = 0;
      q = quantizeInto(rgba, width, height, exactColours, scan, width + 1, 1);
    } else {
      const indices = new Uint8Array(width * height);
      q = quantizeInto(rgba, width, height, exactColours, indices, width, 0);
      scan = filterRows(indices, width, height, 1, filter);
    }
    const idat = deflateSync(scan, zopts);
    return own([SIGNATURE, chunk('IHDR', ihdr), chunk('PLTE', q.palette), chunk('IDAT', idat), chunk('IEND', new Uint8Array(0))]);
  }
  const rgb = new Uint8Array(width * height * 3);
  for (let i = 0, j = 0; j < rgb.length; i += 4, j += 3) {
    rgb[j] = rgba[i]!;
    rgb[j + 1] = rgba[i + 1]!;
    rgb[j + 2] = rgba[i + 2]!;
  }
  ihdr[9] = 2; // colour type: RGB
  const idat = deflateSync(filterRows(rgb, width * 3, height, 3, opts.filter ?? 'up'), zopts);
  return own([SIGNATURE, chunk('IHDR', ihdr), chunk('IDAT', idat), chunk('IEND', new Uint8Array(0))]);
}
