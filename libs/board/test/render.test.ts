import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GlobalFonts, Image, createCanvas, type Canvas } from '@napi-rs/canvas';
import {
  COLOURS,
  FONT_STACK,
  GEOMETRY,
  NAME_W,
  boardFontFiles,
  cardOrigin,
  cleanText,
  drawBoard,
  encodePng,
  ensureBoardGlyphs,
  fitText,
  isRtl,
  layout,
  onDemandFontFiles,
  quantize,
  registerBoardFonts,
  renderBoard,
  sampleAvatar,
  sampleBoard,
  validateBoard,
  type Board,
  type Card,
} from '../src/index.ts';

const G = GEOMETRY;
const AVATAR = sampleAvatar(7);

/** A one-card board whose card has an avatar (so no initial is drawn: the name area is all the name). */
function oneCard(name: string, extra: Partial<Card> = {}): Board {
  return { title: 'T', puzzle: '#1', cards: [{ id: '1', name, avatar: AVATAR, rows: [], ...extra }] };
}

/** The name area of card `i` (px): the clip rectangle the renderer uses. */
function nameRect(b: Board, i = 0): { x: number; y: number; w: number; h: number } {
  const o = cardOrigin(layout(b.cards), i);
  return { x: o.x + G.CARD_PAD + G.AVATAR + G.AVATAR_GAP, y: o.y, w: NAME_W, h: 2 * G.CARD_PAD + G.AVATAR };
}

function pixels(canvas: Canvas): Uint8Array {
  return new Uint8Array(canvas.data());
}

/** Ink in a rectangle: pixels that are not the card's white, and of those, strongly coloured ones; and the ink's x extent. */
function ink(
  canvas: Canvas,
  r: { x: number; y: number; w: number; h: number },
): { ink: number; colour: number; minX: number; maxX: number } {
  const d = pixels(canvas);
  let n = 0;
  let colour = 0;
  let minX = Infinity;
  let maxX = -Infinity;
  for (let y = r.y; y < r.y + r.h; y++) {
    for (let x = r.x; x < r.x + r.w; x++) {
      const i = (y * canvas.width + x) * 4;
      const [R, Gr, B] = [d[i]!, d[i + 1]!, d[i + 2]!];
      if (R < 235 || Gr < 235 || B < 235) {
        n++;
        minX = Math.min(minX, x);
        maxX = Math.max(maxX, x);
      }
      if (Math.max(R, Gr, B) - Math.min(R, Gr, B) > 60) colour++;
    }
  }
  return { ink: n, colour, minX, maxX };
}

function region(canvas: Canvas, r: { x: number; y: number; w: number; h: number }): string {
  const d = pixels(canvas);
  const rows: string[] = [];
  for (let y = r.y; y < r.y + r.h; y++)
    rows.push(Buffer.from(d.subarray((y * canvas.width + r.x) * 4, (y * canvas.width + r.x + r.w) * 4)).toString('base64'));
  return rows.join('');
}

test('the fonts are registered from the packages, once per process; CJK and Hangul files only when a text needs them', () => {
  const r = registerBoardFonts();
  assert.deepEqual(r.lazyFamilies, ['Board SC', 'Board KR']);
  for (const f of ['Board Sans', 'Board Arabic', 'Board Hebrew', 'Board Emoji']) {
    assert.ok(r.families.includes(f) && GlobalFonts.has(f), `${f} registered`);
    assert.ok(FONT_STACK.includes(`"${f}"`), `${f} in the stack`);
  }
  for (const f of r.lazyFamilies) assert.ok(FONT_STACK.includes(`"${f}"`), `${f} in the stack`);
  assert.equal(registerBoardFonts().files, 0, 'a second call registers nothing');
  const before = onDemandFontFiles();
  assert.equal(before.total, boardFontFiles().get('Board SC')!.length + boardFontFiles().get('Board KR')!.length);
  // Latin, Cyrillic, Greek, Arabic, Hebrew and emoji: all in the families registered up front.
  assert.equal(ensureBoardGlyphs('Alice Дмитрий Ωμέγα محمد שירה 😀 #412 · +3'), 0);
  assert.deepEqual(onDemandFontFiles(), before, 'no CJK or Hangul file for them');
  const han = ensureBoardGlyphs('\u9F98'); // a rare Han character: not among the first boards' names
  assert.ok(han >= 1, `files registered for one Han character: ${han}`);
  assert.ok(GlobalFonts.has('Board SC'));
  assert.equal(ensureBoardGlyphs('\u9F98'), 0, 'the second time registers nothing');
  assert.equal(onDemandFontFiles().registered, before.registered + han);
  assert.ok(onDemandFontFiles().registered < before.total / 4, 'far from every file');
  // Declared by Noto Sans's latin slice but missing from its file (and every up-front file): an SC slice draws it.
  for (const ch of ['\u203B', '\u2027']) {
    const sc = onDemandFontFiles().byFamily['Board SC'] ?? 0;
    assert.equal(ensureBoardGlyphs(ch), 1, `U+${ch.codePointAt(0)!.toString(16)} registers the SC slice that has it`);
    assert.equal(onDemandFontFiles().byFamily['Board SC'], sc + 1);
  }
  // A Han character: the slice of the first on-demand family in FONT_STACK (SC), not a KR one as well.
  const kr = onDemandFontFiles().byFamily['Board KR'] ?? 0;
  assert.ok(ensureBoardGlyphs('\u738B\u5C0F\u660E') >= 1, '王小明');
  assert.equal(onDemandFontFiles().byFamily['Board KR'] ?? 0, kr, 'no KR slice for Han characters');
  assert.ok(ensureBoardGlyphs('\uAE40\uBBFC\uC900') >= 1, '김민준: a KR slice');
  assert.equal(onDemandFontFiles().byFamily['Board KR'], kr + 1);
});

test('names in Latin, Cyrillic, CJK, Hangul, Arabic and emoji draw glyphs (pixel diff against no name and against tofu)', () => {
  const blank = drawBoard(oneCard('x'), true);
  const r = nameRect(oneCard('x'));
  // Private-use characters: no font has them, so they draw as .notdef boxes ("tofu").
  const tofu = (n: number): string => region(drawBoard(oneCard('\ue000'.repeat(n)), true).canvas, r);
  for (const [script, name] of [
    ['Latin', 'Alice'],
    ['Cyrillic', 'Дмитрий'],
    ['CJK', '王小明'],
    ['kana', 'さくら'],
    ['Hangul', '김민준'],
    ['Arabic', 'محمد'],
    ['Hebrew', 'שירה'],
  ] as const) {
    const { canvas } = drawBoard(oneCard(name), true);
    const got = ink(canvas, r);
    assert.ok(got.ink > 40, `${script}: ${got.ink} ink pixels`);
    assert.notEqual(region(canvas, r), region(blank.canvas, r), `${script}: differs from another name`);
    assert.notEqual(region(canvas, r), tofu([...name].length), `${script}: not tofu`);
    assert.equal(got.colour, 0, `${script}: text is drawn in the text colour`);
  }
  const emoji = drawBoard(oneCard('🎉😀'), true);
  const e = ink(emoji.canvas, r);
  assert.ok(e.colour > 40, `emoji are drawn in colour: ${e.colour} coloured pixels`);
  assert.notEqual(region(emoji.canvas, r), tofu(2), 'emoji: not tofu');
});

test('an initial is drawn for a card without an avatar (or with bytes that are not an image)', () => {
  const b = (avatar: Uint8Array | null): Board => oneCard('Zed', { avatar });
  const o = cardOrigin(layout(1), 0);
  const a = { x: o.x + G.CARD_PAD, y: o.y + G.CARD_PAD, w: G.AVATAR, h: G.AVATAR };
  const none = drawBoard(b(null), true).canvas;
  const junk = drawBoard(b(new Uint8Array([1, 2, 3])), true).canvas;
  const photo = drawBoard(b(AVATAR), true).canvas;
  assert.ok(ink(none, a).colour > 100, 'a coloured circle');
  assert.equal(region(none, a), region(junk, a), 'undecodable bytes draw the initial');
  assert.notEqual(region(none, a), region(photo, a), 'a photo draws the photo');
});

test('names are truncated by measured width with an ellipsis, by whole graphemes', () => {
  const ctx = createCanvas(10, 10).getContext('2d');
  ctx.font = `${G.NAME_PX}px ${FONT_STACK}`;
  assert.equal(fitText(ctx, 'Bob', NAME_W), 'Bob');
  const long = 'Bartholomew Montgomery-Smythe the Third';
  const t = fitText(ctx, long, NAME_W);
  assert.ok(t.endsWith('…') && t.length > 3, t);
  assert.ok(long.startsWith(t.slice(0, -1)), t);
  assert.ok(ctx.measureText(t).width <= NAME_W);
  // One more grapheme would not fit.
  const next = long.slice(0, t.length) + '…';
  assert.ok(ctx.measureText(next).width > NAME_W || long.slice(0, t.length).endsWith(' '), `${next} should not fit`);
  const family = '👨‍👩‍👧';
  const f = fitText(ctx, family.repeat(20), NAME_W);
  assert.ok(f.endsWith('…'));
  assert.equal((f.length - 1) % family.length, 0, 'no family emoji split');
  assert.ok(f.length > family.length);
  assert.equal(fitText(ctx, long, 2), '', 'nothing fits, not even …');
  // On the board: the drawn name stays in its area.
  const b = oneCard(long);
  const r = nameRect(b);
  const got = ink(drawBoard(b, true).canvas, r);
  assert.ok(got.minX >= r.x && got.maxX < r.x + r.w);
  assert.ok(got.maxX > r.x + r.w - 12, 'a truncated name fills its width');
});

test('an RTL name is right-aligned, truncated, and changes no pixel outside its name area', () => {
  const name = 'محمد عبد الله بن عبد الرحمن الطويل جدا';
  assert.equal(isRtl(name), true);
  assert.equal(isRtl('Alice محمد'), false);
  assert.equal(isRtl('123 שלום'), true, 'the first strong character decides');
  const cards = (n: string): Card[] => [
    { id: '1', name: n, avatar: AVATAR, rows: [['green', 'yellow', 'grey', 'grey', 'green']] },
    { id: '2', name: 'Neighbour', avatar: null, rows: [] },
  ];
  const b = { title: 'T', puzzle: '#1', cards: cards(name) };
  const rtl = drawBoard(b, true).canvas;
  const ltr = drawBoard({ ...b, cards: cards('x') }, true).canvas;
  const r = nameRect(b);
  const a = pixels(rtl);
  const c = pixels(ltr);
  let outside = 0;
  for (let y = 0; y < rtl.height; y++) {
    for (let x = 0; x < rtl.width; x++) {
      if (x >= r.x && x < r.x + r.w && y >= r.y && y < r.y + r.h) continue;
      const i = (y * rtl.width + x) * 4;
      if (a[i] !== c[i] || a[i + 1] !== c[i + 1] || a[i + 2] !== c[i + 2]) outside++;
    }
  }
  assert.equal(outside, 0, 'pixels changed outside the name area');
  const got = ink(rtl, r);
  assert.ok(got.maxX >= r.x + r.w - 3, `right-aligned: ink ends at ${got.maxX}, area ends at ${r.x + r.w}`);
  assert.ok(got.minX >= r.x, 'inside on the left');
  const ctx = createCanvas(10, 10).getContext('2d');
  ctx.font = `${G.NAME_PX}px ${FONT_STACK}`;
  const t = fitText(ctx, name, NAME_W);
  assert.ok(t.endsWith('…') && ctx.measureText(t).width <= NAME_W, 'truncated by width, not only clipped');
});

test('bidi overrides and controls in a name are removed', () => {
  assert.equal(cleanText('\u202Eevil\u202C name\u0007\n  two'), 'evil name two');
  assert.equal(cleanText('\u2067x\u2069'), 'x');
});

test('a 40-card board is a PNG under 100 KB, with every card having an avatar too', () => {
  for (const share of [0.5, 1]) {
    const r = renderBoard(sampleBoard(40, { avatarShare: share }));
    assert.ok(r.png.length < 100_000, `${r.png.length} bytes at avatar share ${share}`);
    assert.deepEqual([r.width, r.height, r.cards, r.hidden], [1136, 952, 40, 0]);
    const img = new Image();
    img.src = r.png;
    assert.deepEqual([img.width, img.height], [1136, 952], 'a PNG of the right size');
    assert.equal(r.png.byteOffset, 0);
    assert.equal(r.png.buffer.byteLength, r.png.length, 'owns its ArrayBuffer (transferable)');
  }
  const big = renderBoard(sampleBoard(100));
  assert.deepEqual([big.cards, big.hidden, big.width, big.height], [64, 36, 1136, 1492]);
});

test('encodePng: RGB is lossless; indexed is exact with ≤ 256 colours and close past that', () => {
  const decode = (png: Buffer, w: number, h: number): Uint8Array => {
    const img = new Image();
    img.src = png;
    const c = createCanvas(w, h);
    c.getContext('2d').drawImage(img, 0, 0);
    return pixels(c);
  };
  const b = sampleBoard(10);
  const { canvas, layout: l } = drawBoard(b, true);
  const src = pixels(canvas);
  assert.deepEqual(decode(encodePng(src, l.width, l.height, { mode: 'rgb' }), l.width, l.height), src, 'rgb round trip');

  const flat = createCanvas(64, 32);
  const fx = flat.getContext('2d');
  for (const [i, col] of [COLOURS.page, COLOURS.green, COLOURS.yellow, COLOURS.grey].entries()) {
    fx.fillStyle = col;
    fx.fillRect(i * 16, 0, 16, 32);
  }
  const fp = pixels(flat);
  const q = quantize(fp, 64 * 32);
  assert.deepEqual([q.exact, q.size, q.unique], [true, 4, 4]);
  assert.deepEqual(decode(encodePng(fp, 64, 32), 64, 32), fp, 'indexed round trip with 4 colours');

  const grad = createCanvas(1000, 4);
  const gx = grad.getContext('2d');
  for (let x = 0; x < 1000; x++) {
    gx.fillStyle = `rgb(${x % 256}, ${Math.floor(x / 4) % 256}, ${(x * 7) % 256})`;
    gx.fillRect(x, 0, 1, 4);
  }
  const gp = pixels(grad);
  const gq = quantize(gp, 4000);
  assert.equal(gq.exact, false);
  assert.equal(gq.size, 256);
  assert.ok(gq.unique > 900);
  const back = decode(encodePng(gp, 1000, 4), 1000, 4);
  let maxErr = 0;
  let sumErr = 0;
  for (let i = 0; i < gp.length; i++) {
    maxErr = Math.max(maxErr, Math.abs(gp[i]! - back[i]!));
    sumErr += Math.abs(gp[i]! - back[i]!);
  }
  // 1,000 scattered colours into 256 entries: close on average, bounded at worst.
  assert.ok(sumErr / gp.length <= 4, `mean channel error ${sumErr / gp.length}`);
  assert.ok(maxErr <= 40, `max channel error ${maxErr}`);
  // A real board (photos, emoji, anti-aliased text): nearly every pixel exact.
  const board = drawBoard(sampleBoard(40, { avatarShare: 1 }), true);
  const bp = pixels(board.canvas);
  const bb = decode(encodePng(bp, board.canvas.width, board.canvas.height), board.canvas.width, board.canvas.height);
  let changed = 0;
  sumErr = 0;
  for (let i = 0; i < bp.length; i++) {
    if (bp[i] !== bb[i]) changed++;
    sumErr += Math.abs(bp[i]! - bb[i]!);
  }
  assert.ok(changed / bp.length < 0.02, `${changed} of ${bp.length} channel values changed`);
  assert.ok(sumErr / bp.length < 0.2, `mean channel error ${sumErr / bp.length}`);
});

test('encodePng refuses inconsistent sizes and options', () => {
  const px = new Uint8Array(16);
  assert.throws(() => encodePng(px, 3, 1), RangeError);
  assert.throws(() => encodePng(px, 0, 4), RangeError);
  assert.throws(() => encodePng(px, 2, 2, { level: 10 }), RangeError);
  assert.throws(() => encodePng(px, 2, 2, { exactColours: 300 }), RangeError);
  assert.equal(encodePng(px.fill(255), 2, 2).subarray(1, 4).toString('latin1'), 'PNG');
});

test('a malformed board is refused with the field named, before anything is drawn', () => {
  const ok = sampleBoard(2, { avatarShare: 0 });
  const bad = (cards: unknown): Board => ({ ...ok, cards: cards as Card[] });
  assert.throws(() => renderBoard(bad([ok.cards[0], { ...ok.cards[1]!, rows: [['green', 'blue', 'grey', 'grey', 'grey']] }])), {
    name: 'TypeError',
    message: /board\.cards\[1\]\.rows\[0\]: "blue"/,
  });
  assert.throws(() => validateBoard(bad([{ ...ok.cards[0]!, rows: Array(7).fill(['grey', 'grey', 'grey', 'grey', 'grey']) }])), {
    name: 'TypeError',
    message: /rows: 7 rows, at most 6/,
  });
  assert.throws(() => validateBoard(bad([{ ...ok.cards[0]!, rows: [['grey']] }])), {
    name: 'TypeError',
    message: /rows\[0\]: not an array of 5/,
  });
  assert.throws(() => validateBoard(bad([{ ...ok.cards[0]!, avatar: 'x' }])), { name: 'TypeError', message: /avatar: not a Uint8Array/ });
  assert.throws(() => validateBoard({ ...ok, title: 1 as unknown as string }), { name: 'TypeError', message: /board\.title/ });
  validateBoard(ok);
});
