/** What the board delivery suites share: a stand-in render pool's PNG and the puzzle states they publish. */
import { createHash } from 'node:crypto';
import type { Board } from '@crowdplay/board';
import { boardOf } from '../src/chat-boards.ts';

/** The chats' title in these suites. */
export const TITLE = 'chat';

/** A board's stand-in PNG: the PNG signature and IHDR, then the board's content (so each state has its own bytes). */
export function fakePng(board: Board): Buffer {
  const head = Buffer.alloc(24);
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]).copy(head, 0);
  head.writeUInt32BE(400, 16);
  head.writeUInt32BE(300, 20);
  return Buffer.concat([head, Buffer.from(JSON.stringify(board.cards.map((c) => [c.id, c.rows])))]);
}

/** Each player's marks, by viewer id. */
export type Players = Record<string, string[]>;

/** The word puzzle's state with these players (none solved). */
export const stateOf = (players: Players) => ({
  puzzle: 1,
  players: Object.fromEntries(Object.entries(players).map(([v, marks]) => [v, { marks, solved: false, name: v }])),
});

/** The SHA-256 of the stand-in PNG of the board of that state: what the stub must show. */
export const shaOf = (players: Players): string =>
  createHash('sha256')
    .update(fakePng(boardOf(TITLE, stateOf(players))))
    .digest('hex');
