/**
 * Deterministic sample boards for the bench, the tests and demos: names in
 * several scripts (Latin, Cyrillic, CJK, Hangul, Arabic, Hebrew, emoji),
 * some long enough to be truncated, photo-like JPEG avatars (160 × 160, the
 * size of Telegram's smallest profile photo) on a given share of the cards,
 * and guesses at every stage of a game.
 */
import { createCanvas } from '@napi-rs/canvas';
import { CARD_ROWS, ROW_SQUARES, type Board, type Card, type Square } from './model.ts';

const NAMES = [
  'Alice',
  'Дмитрий Иванов',
  '王小明',
  'Bob the Builder of Very Long Names',
  'محمد عبد الله',
  '김민준',
  'Zoë 🎉',
  'שירה כהן',
  'Jean-Baptiste Émile',
  'Ольга 🌸',
  '佐藤 花子',
  'Nguyễn Văn An',
] as const;

/** mulberry32: a small deterministic PRNG. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** A photo-like JPEG avatar (gradient and blocks, 160 × 160, ~10 KB), different per seed. */
export function sampleAvatar(seed: number): Buffer {
  const rand = rng(seed);
  const c = createCanvas(160, 160);
  const x = c.getContext('2d');
  const g = x.createLinearGradient(0, 0, 160, 160);
  g.addColorStop(0, `hsl(${Math.floor(rand() * 360)}, 55%, 55%)`);
  g.addColorStop(1, `hsl(${Math.floor(rand() * 360)}, 55%, 35%)`);
  x.fillStyle = g;
  x.fillRect(0, 0, 160, 160);
  for (let i = 0; i < 120; i++) {
    x.fillStyle = `hsla(${Math.floor(rand() * 360)}, 60%, ${30 + Math.floor(rand() * 40)}%, 0.6)`;
    x.beginPath();
    x.arc(rand() * 160, rand() * 160, 4 + rand() * 14, 0, Math.PI * 2);
    x.fill();
  }
  return c.toBuffer('image/jpeg', 85);
}

/**
 * A board of `cards` players. `avatarShare` (0–1, default 0.5) of the cards
 * get a JPEG avatar; the others are drawn with an initial.
 */
export function sampleBoard(cards: number, opts: { seed?: number; avatarShare?: number } = {}): Board {
  const rand = rng(opts.seed ?? 1);
  const share = opts.avatarShare ?? 0.5;
  const out: Card[] = [];
  for (let i = 0; i < cards; i++) {
    const guesses = Math.floor(rand() * (CARD_ROWS + 1));
    const rows: Square[][] = [];
    for (let r = 0; r < guesses; r++) {
      const solved = r === guesses - 1 && rand() < 0.5;
      const row: Square[] = [];
      for (let c = 0; c < ROW_SQUARES; c++) {
        const p = rand();
        row.push(solved ? 'green' : p < 0.2 ? 'green' : p < 0.45 ? 'yellow' : 'grey');
      }
      rows.push(row);
    }
    out.push({
      id: String(100_000 + i * 7919),
      name: `${NAMES[i % NAMES.length]!}${i >= NAMES.length ? ` ${i}` : ''}`,
      avatar: rand() < share ? sampleAvatar(i + 1) : null,
      rows,
    });
  }
  return { title: 'Wordle Club · Крокодилы · 単語', puzzle: '#412', cards: out };
}
