/**
 * The renderer: a Board → a PNG at 1x, with @napi-rs/canvas, synchronous (it
 * runs on a render thread; see pool.ts). Geometry in layout.ts, fonts in
 * fonts.ts, the PNG encoder in png.ts.
 */
import { createHash } from 'node:crypto';
import { createCanvas, Image, type Canvas, type SKRSContext2D } from '@napi-rs/canvas';
import { FONT_STACK, ensureBoardGlyphs, registerBoardFonts } from './fonts.ts';
import { GEOMETRY as G, GRID_W, NAME_W, cardOrigin, layout, roundOrigin, type BoardLayout } from './layout.ts';
import { CARD_ROWS, ROW_SQUARES, validateBoard, type Board, type BoardRound, type Card, type Square } from './model.ts';
import { roundStripText } from './round-strip.ts';
import { BOARD_PNG_OPTIONS, encodePng, type PngOptions } from './png.ts';

/** Colours (a light theme: Telegram shows the photo on either chat background). */
export const COLOURS = {
  page: '#eef0f3',
  card: '#ffffff',
  text: '#1a1a1b',
  muted: '#6b6f76',
  green: '#6aaa64',
  yellow: '#c9b458',
  grey: '#787c7e',
  emptyBorder: '#d3d6da',
  emptyFill: '#ffffff',
} as const;

/** Initials' circle colours, picked by a hash of the card's id. */
const INITIAL_COLOURS = ['#e17076', '#eda86c', '#a695e7', '#7bc862', '#6ec9cb', '#65aadd', '#ee7aae', '#faa774'] as const;

/** What one render produced. */
export interface RenderResult {
  /** The PNG (owns its ArrayBuffer: transferable). */
  readonly png: Buffer;
  /** Canvas size (px). */
  readonly width: number;
  readonly height: number;
  /** Cards drawn, and counted but not drawn. */
  readonly cards: number;
  readonly hidden: number;
  /** Time spent drawing and encoding (ms, this thread). */
  readonly drawMs: number;
  readonly encodeMs: number;
}

/** Render options (the defaults are what the product uses). */
export interface RenderOptions {
  /** `board` (png.ts, default) or `skia` (@napi-rs/canvas `encode('png')`: for the bench's comparison). */
  readonly encoder?: 'board' | 'skia';
  /** Options of the `board` encoder. */
  readonly png?: PngOptions;
}

const segmenter = new Intl.Segmenter(undefined, { granularity: 'grapheme' });
/** C0/C1 controls and the bidi embedding, override and isolate controls: a name cannot reorder the board. */
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\ufeff]/g;
const FIRST_STRONG = /[\p{L}]/u;
const RTL_SCRIPT = /[\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}\p{Script=Adlam}]/u;

/** A name as drawn: controls and bidi overrides removed, whitespace collapsed. */
export function cleanText(s: string): string {
  return s.replace(UNSAFE, '').replace(/\s+/gu, ' ').trim();
}

/** True when the first strong (letter) character of `s` is from a right-to-left script. */
export function isRtl(s: string): boolean {
  const m = FIRST_STRONG.exec(s);
  return m !== null && RTL_SCRIPT.test(m[0]);
}

/**
 * `text`, or its longest prefix of whole graphemes followed by `…`, that
 * measures at most `maxW` px in the context's current font (measureText).
 * Empty when not even `…` fits.
 */
export function fitText(ctx: SKRSContext2D, text: string, maxW: number): string {
  if (ctx.measureText(text).width <= maxW) return text;
  const g = Array.from(segmenter.segment(text), (s) => s.segment);
  let lo = 0; // fits
  let hi = g.length; // does not fit (the whole text did not)
  if (ctx.measureText('…').width > maxW) return '';
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (ctx.measureText(`${g.slice(0, mid).join('').trimEnd()}…`).width <= maxW) lo = mid;
    else hi = mid;
  }
  return `${g.slice(0, lo).join('').trimEnd()}…`;
}

function hashIndex(s: string, n: number): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return (h >>> 0) % n;
}

/** Decoded avatars (by content hash) and initials of this thread, as AVATAR-sized circles (LRU). */
const AVATAR_CACHE_MAX = 2048;
const avatarCache = new Map<string, Canvas | null>();

/** The avatar as a AVATAR × AVATAR circle (decoded once per thread), or null when the bytes are not an image. */
function avatarTile(bytes: Uint8Array): Canvas | null {
  const key = createHash('sha1').update(bytes).digest('base64');
  const hit = avatarCache.get(key);
  if (hit !== undefined) {
    avatarCache.delete(key);
    avatarCache.set(key, hit);
    return hit;
  }
  let tile: Canvas | null = null;
  const img = new Image();
  try {
    img.src = bytes;
  } catch {
    // an undecodable avatar is drawn as an initial
  }
  if (img.width > 0 && img.height > 0) {
    tile = createCanvas(G.AVATAR, G.AVATAR);
    const t = tile.getContext('2d');
    t.beginPath();
    t.arc(G.AVATAR / 2, G.AVATAR / 2, G.AVATAR / 2, 0, Math.PI * 2);
    t.clip();
    // Cover: the centred square of the image, scaled first and drawn 1:1 in the circle, so a board
    // drawn from avatarThumbnail() bytes is the same picture.
    if (img.width === G.AVATAR && img.height === G.AVATAR) t.drawImage(img, 0, 0);
    else t.drawImage(coverSquare(img), 0, 0);
  }
  avatarCache.set(key, tile);
  if (avatarCache.size > AVATAR_CACHE_MAX) avatarCache.delete(avatarCache.keys().next().value!);
  return tile;
}

/**
 * The avatar as the card draws it: the centred square of the image scaled to
 * GEOMETRY.AVATAR × GEOMETRY.AVATAR px (24), as a PNG (~1–2 KB instead of a
 * profile photo's ~5–15 KB), so a process can hold every playing chat's
 * avatars for a puzzle's life (10,000 players ≈ 15 MB). A board drawn with
 * the thumbnail is pixel-identical to one drawn with an opaque original (the
 * card scales any avatar this way first, then draws it 1:1 inside its circle;
 * tested). Synchronous: run it on a
 * render thread (`RenderPool.thumbnail`).
 * The decoded image and the canvas are native memory that @napi-rs/canvas
 * frees only when V8 collects their (small) JS objects: `native.bytes` grows
 * by what this call left to the collector (decoded pixels, 4 bytes each, and
 * the canvas), so a thread can collect by native bytes rather than wait for
 * its own heap to fill (worker.ts; measured: 3,000 thumbnails on 2 threads
 * grew the process by 93 MB without it, 43–65 MB with it: docs/board.md).
 * @param bytes an image @napi-rs/canvas decodes (JPEG, PNG, WebP, GIF)
 * @param native when given, `native.bytes` is increased by the native bytes left for the collector
 * @returns the PNG, the input itself when it already is AVATAR × AVATAR, or null when the bytes are not an image
 */
export function avatarThumbnail(bytes: Uint8Array, native?: { bytes: number }): Uint8Array | null {
  const img = new Image();
  try {
    img.src = bytes;
  } catch {
    return null;
  }
  if (!(img.width > 0 && img.height > 0)) return null;
  if (native) native.bytes += img.width * img.height * 4;
  if (img.width === G.AVATAR && img.height === G.AVATAR) return bytes;
  if (native) native.bytes += G.AVATAR * G.AVATAR * 4;
  return new Uint8Array(coverSquare(img).encodeSync('png'));
}

/** The centred square of `img` scaled to AVATAR × AVATAR (no clip). */
function coverSquare(img: Image): Canvas {
  const canvas = createCanvas(G.AVATAR, G.AVATAR);
  const side = Math.min(img.width, img.height);
  canvas.getContext('2d').drawImage(img, (img.width - side) / 2, (img.height - side) / 2, side, side, 0, 0, G.AVATAR, G.AVATAR);
  return canvas;
}

const SQUARE_FILL: Record<Exclude<Square, 'empty'>, string> = { green: COLOURS.green, yellow: COLOURS.yellow, grey: COLOURS.grey };

/** Fitted (truncated) texts of this thread, by font, width and text: boards are redrawn with the same names. */
const FITTED_MAX = 4096;
const fitted = new Map<string, string>();

function fitCached(ctx: SKRSContext2D, text: string, maxW: number): string {
  const key = `${ctx.font}|${maxW}|${text}`;
  let s = fitted.get(key);
  if (s === undefined) {
    s = fitText(ctx, text, maxW);
    fitted.set(key, s);
    if (fitted.size > FITTED_MAX) fitted.delete(fitted.keys().next().value!);
  }
  return s;
}

function drawText(ctx: SKRSContext2D, text: string, x: number, y: number, maxW: number): void {
  const rtl = isRtl(text);
  const s = fitCached(ctx, text, maxW);
  ctx.direction = rtl ? 'rtl' : 'ltr';
  ctx.textAlign = rtl ? 'right' : 'left';
  ctx.fillText(s, rtl ? x + maxW : x, y);
}

/** This thread's empty card (background and six rows of empty squares), drawn once. */
let blankCard: Canvas | null = null;
const STEP = G.SQUARE + G.SQUARE_GAP;
const GRID_X = Math.floor((G.CARD_W - GRID_W) / 2);
const GRID_Y = G.CARD_PAD + G.AVATAR + G.GRID_TOP_GAP;

function emptyCard(): Canvas {
  if (blankCard) return blankCard;
  const c = createCanvas(G.CARD_W, G.CARD_H);
  const t = c.getContext('2d');
  t.fillStyle = COLOURS.card;
  t.fillRect(0, 0, G.CARD_W, G.CARD_H);
  for (let r = 0; r < CARD_ROWS; r++) {
    for (let col = 0; col < ROW_SQUARES; col++) {
      const sx = GRID_X + col * STEP;
      const sy = GRID_Y + r * STEP;
      t.fillStyle = COLOURS.emptyBorder;
      t.fillRect(sx, sy, G.SQUARE, G.SQUARE);
      t.fillStyle = COLOURS.emptyFill;
      t.fillRect(sx + 2, sy + 2, G.SQUARE - 4, G.SQUARE - 4);
    }
  }
  blankCard = c;
  return c;
}

/** An initial in its coloured circle, AVATAR × AVATAR, cached per thread with the avatars. */
function initialTile(colour: string, letter: string): Canvas {
  const key = `initial|${colour}|${letter}`;
  const hit = avatarCache.get(key);
  if (hit) return hit;
  const c = createCanvas(G.AVATAR, G.AVATAR);
  const t = c.getContext('2d');
  t.lang = 'en';
  t.fillStyle = colour;
  t.beginPath();
  t.arc(G.AVATAR / 2, G.AVATAR / 2, G.AVATAR / 2, 0, Math.PI * 2);
  t.fill();
  t.font = `${G.NAME_PX}px ${FONT_STACK}`;
  t.textBaseline = 'middle';
  t.textAlign = 'center';
  t.fillStyle = '#ffffff';
  t.fillText(letter, G.AVATAR / 2, G.AVATAR / 2 + 1);
  avatarCache.set(key, c);
  if (avatarCache.size > AVATAR_CACHE_MAX) avatarCache.delete(avatarCache.keys().next().value!);
  return c;
}

function drawCard(ctx: SKRSContext2D, card: Card, x: number, y: number): void {
  ctx.drawImage(emptyCard(), x, y);
  const name = cleanText(card.name) || '?';
  // Avatar, or a coloured initial.
  const ax = x + G.CARD_PAD;
  const ay = y + G.CARD_PAD;
  const tile = card.avatar ? avatarTile(card.avatar) : null;
  if (tile) ctx.drawImage(tile, ax, ay);
  else {
    const first = segmenter.segment(name)[Symbol.iterator]().next().value?.segment ?? '?';
    ctx.drawImage(initialTile(INITIAL_COLOURS[hashIndex(card.id, INITIAL_COLOURS.length)]!, first.toLocaleUpperCase()), ax, ay);
  }
  // Name, clipped to its area so no text (RTL, combining marks, a font's overhang) leaves it.
  const nx = ax + G.AVATAR + G.AVATAR_GAP;
  ctx.save();
  ctx.beginPath();
  ctx.rect(nx, y, NAME_W, G.CARD_PAD * 2 + G.AVATAR);
  ctx.clip();
  ctx.fillStyle = COLOURS.text;
  drawText(ctx, name, nx, ay + G.AVATAR / 2 + 1, NAME_W);
  ctx.restore();
  // Guessed squares over the empty grid.
  for (let r = 0; r < card.rows.length; r++) {
    const row = card.rows[r]!;
    for (let c = 0; c < ROW_SQUARES; c++) {
      const sq = row[c]!;
      if (sq === 'empty') continue;
      ctx.fillStyle = SQUARE_FILL[sq];
      ctx.fillRect(x + GRID_X + c * STEP, y + GRID_Y + r * STEP, G.SQUARE, G.SQUARE);
    }
  }
}

/** Draws round strip `i` (its box, the question and state, the figures or the result) at the layout's width `width`. */
function drawRound(ctx: SKRSContext2D, r: BoardRound, i: number, width: number): void {
  const { x, y } = roundOrigin(i);
  const w = width - 2 * G.MARGIN;
  const h = G.ROUND_H - G.ROUND_GAP;
  const t = roundStripText(r);
  ctx.fillStyle = COLOURS.card;
  ctx.fillRect(x, y, w, h);
  ctx.save();
  ctx.beginPath();
  ctx.rect(x, y, w, h);
  ctx.clip();
  ctx.font = `${G.ROUND_PX}px ${FONT_STACK}`;
  const inner = w - 2 * G.CARD_PAD;
  const state = cleanText(t.state);
  const stateW = Math.min(ctx.measureText(state).width, inner / 3);
  ctx.fillStyle = COLOURS.muted;
  ctx.direction = 'ltr';
  ctx.textAlign = 'right';
  ctx.fillText(fitText(ctx, state, stateW), x + w - G.CARD_PAD, y + h / 4 + 1);
  ctx.fillStyle = COLOURS.text;
  drawText(ctx, cleanText(t.title), x + G.CARD_PAD, y + h / 4 + 1, Math.max(0, inner - stateW - 8));
  ctx.fillStyle = r.state === 'settled' ? COLOURS.green : COLOURS.text;
  drawText(ctx, cleanText(t.figures), x + G.CARD_PAD, y + (3 * h) / 4, inner);
  ctx.restore();
}

/** This thread's canvas of the last size drawn: reused while the size holds (a new surface costs page faults). */
let lastCanvas: Canvas | null = null;

/**
 * Draws a board (no encoding) on this thread's canvas: the returned canvas is
 * overwritten by the next `drawBoard` of the same size on this thread, unless
 * `fresh` is set.
 */
export function drawBoard(board: Board, fresh = false): { canvas: Canvas; layout: BoardLayout } {
  validateBoard(board);
  const rounds = board.rounds ?? [];
  const l = layout(board.cards, rounds.length);
  // The CJK and Hangul font files this board's text needs, registered before any of it is measured.
  ensureBoardGlyphs(board.title);
  ensureBoardGlyphs(board.puzzle);
  for (const r of rounds) ensureBoardGlyphs([r.title, ...r.outcomes.map((o) => o.label)].join(' '));
  for (let i = 0; i < l.shown; i++) ensureBoardGlyphs(board.cards[i]!.name);
  let canvas: Canvas;
  if (!fresh && lastCanvas !== null && lastCanvas.width === l.width && lastCanvas.height === l.height) canvas = lastCanvas;
  else {
    canvas = createCanvas(l.width, l.height);
    if (!fresh) lastCanvas = canvas;
  }
  const ctx = canvas.getContext('2d');
  ctx.reset();
  ctx.lang = 'en';
  ctx.fillStyle = COLOURS.page;
  ctx.fillRect(0, 0, l.width, l.height);
  ctx.textBaseline = 'middle';
  // Title bar: puzzle id (and +N) right-aligned, the chat title in what is left.
  const ty = G.MARGIN + G.HEADER_H / 2 - 2;
  const innerW = l.width - 2 * G.MARGIN;
  ctx.font = `${G.TITLE_PX}px ${FONT_STACK}`;
  const right = cleanText(l.hidden > 0 ? `${board.puzzle} · +${l.hidden}` : board.puzzle);
  const rightW = Math.min(ctx.measureText(right).width, innerW / 2);
  ctx.fillStyle = COLOURS.muted;
  ctx.save();
  ctx.beginPath();
  ctx.rect(G.MARGIN, G.MARGIN, innerW, G.HEADER_H);
  ctx.clip();
  ctx.direction = 'ltr';
  ctx.textAlign = 'right';
  ctx.fillText(fitText(ctx, right, rightW), l.width - G.MARGIN, ty);
  ctx.fillStyle = COLOURS.text;
  ctx.beginPath();
  ctx.rect(G.MARGIN, G.MARGIN, innerW - rightW - 12, G.HEADER_H);
  ctx.clip();
  drawText(ctx, cleanText(board.title), G.MARGIN, ty, Math.max(0, innerW - rightW - 12));
  ctx.restore();
  rounds.forEach((r, i) => drawRound(ctx, r, i, l.width));
  ctx.font = `${G.NAME_PX}px ${FONT_STACK}`;
  for (let i = 0; i < l.shown; i++) {
    const { x, y } = cardOrigin(l, i);
    drawCard(ctx, board.cards[i]!, x, y);
  }
  return { canvas, layout: l };
}

/** This thread's RGBA read-back buffer (grown as needed). */
let pixelBuffer = new Uint8Array(0);
/** Rows read back per `getImageData` call: strips of ~256 KB. */
const STRIP_BYTES = 256 * 1024;

/**
 * The canvas's RGBA pixels, read back in strips of ~256 KB with
 * `getImageData` into this thread's buffer (overwritten by the next call).
 * Not `canvas.data()`: that returns one native buffer of the whole canvas
 * (4.3 MB at 40 cards) that V8 does not count, so it is freed only at some
 * later collection (hundreds of MB piled up across renders, measured), and
 * it costs ~4 ms even for a 4-card canvas; the strips are V8 array buffers,
 * collected young.
 */
export function readPixels(canvas: Canvas, width: number, height: number): Uint8Array {
  const bytes = width * height * 4;
  if (pixelBuffer.length < bytes) pixelBuffer = new Uint8Array(bytes);
  const ctx = canvas.getContext('2d');
  const rows = Math.max(1, Math.floor(STRIP_BYTES / (width * 4)));
  for (let y = 0; y < height; y += rows) {
    const h = Math.min(rows, height - y);
    pixelBuffer.set(ctx.getImageData(0, y, width, h).data, y * width * 4);
  }
  return pixelBuffer.subarray(0, bytes);
}

/**
 * Renders a board to a PNG at 1x on this thread (fonts registered on first
 * use). Sizes: see `layout()`. Cost: see `renderCost()`.
 * @throws TypeError when the board is malformed (validateBoard)
 */
export function renderBoard(board: Board, opts: RenderOptions = {}): RenderResult {
  registerBoardFontsOnce();
  const t0 = performance.now();
  const { canvas, layout: l } = drawBoard(board);
  const t1 = performance.now();
  const png =
    opts.encoder === 'skia'
      ? canvas.encodeSync('png')
      : encodePng(readPixels(canvas, l.width, l.height), l.width, l.height, { ...BOARD_PNG_OPTIONS, ...opts.png });
  const t2 = performance.now();
  return { png, width: l.width, height: l.height, cards: l.shown, hidden: l.hidden, drawMs: t1 - t0, encodeMs: t2 - t1 };
}

/** Drops this thread's avatar cache and cached canvas (before the thread exits: see worker.ts). */
export function releaseThreadCaches(): void {
  avatarCache.clear();
  fitted.clear();
  lastCanvas = null;
  pixelBuffer = new Uint8Array(0);
  blankCard = null;
}

let fontsReady = false;
function registerBoardFontsOnce(): void {
  if (fontsReady) return;
  registerBoardFonts();
  fontsReady = true;
}

/**
 * Registers the fonts and draws one line in every script registered up front
 * once, so the process pays Skia's one-time font loading at start-up instead
 * of in the first board (CJK and Hangul files load when a board needs them:
 * fonts.ts `ensureBoardGlyphs`). Returns the time taken (ms).
 */
export function warmUpFonts(): number {
  const t0 = performance.now();
  registerBoardFontsOnce();
  const ctx = createCanvas(64, 32).getContext('2d');
  ctx.font = `${G.NAME_PX}px ${FONT_STACK}`;
  ctx.fillText('Aa Жж Ωω שלום مرحبا 😀', 0, 16);
  return performance.now() - t0;
}
