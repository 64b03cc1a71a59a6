import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessBus, encodeJson, subjects } from '@crowdplay/bus';
import type { Board } from '@crowdplay/board';
import type { RoundView } from '@crowdplay/protocol';
import { telegramChannelId, type TelegramClient } from '@crowdplay/telegram';
import { createTelemetry } from '@crowdplay/telemetry';
import { AVATAR_REV_SPAN, ChatBoards, boardVersion } from '../src/chat-boards.ts';
import { LocalBoardEnds, publishingHooks, type RenderQueue } from '@crowdplay/board-renderer';
import { RefreshScheduler } from '../src/scheduler.ts';

const telemetry = createTelemetry({ service: 'chat-boards-test', level: 'silent', refusalLogIntervalMs: 60_000 });
const CHAT = -1001234;

/** A deferred avatar read per user; `reads` counts calls per user. */
function fakeAvatars() {
  const pending = new Map<number, (b: Uint8Array | null) => void>();
  const reads = new Map<number, number>();
  return {
    pending,
    reads,
    get(id: number): Promise<Uint8Array | null> {
      reads.set(id, (reads.get(id) ?? 0) + 1);
      return new Promise((resolve) => pending.set(id, resolve));
    },
  };
}

function rig() {
  const bus = new InProcessBus();
  const subj = subjects('cb-test');
  let now = 1_000_000;
  const avatars = fakeAvatars();
  const rendered: Array<{ version: number; board: Board; rank: number | undefined }> = [];
  const queued: number[] = [];
  // The render queue: what was submitted (its consumer's render and send are tested in render-queue-*.test.ts).
  const renders = {
    submit: (_chat: number, version: number, board: Board, rank?: number) => {
      rendered.push({ version, board, rank });
      queued.push(version);
      return Promise.resolve({ status: 'queued' });
    },
  } as unknown as RenderQueue;
  const client = { avatars } as unknown as TelegramClient;
  const costs: Array<[cards: number, rounds: number]> = [];
  const costMs = (cards: number, rounds: number): number => {
    costs.push([cards, rounds]);
    return 5;
  };
  const scheduler = new RefreshScheduler({
    renderBudgetMsPerS: 1000,
    sendBudgetPerS: 100,
    pacing: { groupRatePerMin: 20, groupBurst: 1, chatRatePerS: 1 },
    costMs,
  });
  const boards = new ChatBoards({ bus, subjects: subj, client, renders, scheduler, telemetry, now: () => now });
  const publish = (ev: number, puzzle: number, players: Record<string, string[]>, rounds?: RoundView[]): void => {
    const game = {
      puzzle,
      players: Object.fromEntries(Object.entries(players).map(([v, marks]) => [v, { marks, solved: false, name: v }])),
    };
    bus.publish(
      subj.channelOut(telegramChannelId(CHAT)),
      encodeJson({ t: 'update', channel: 'x', ev, at: now, actions: [], tally: {}, game, ...(rounds ? { rounds } : {}) }),
    );
  };
  return {
    costs,
    boards,
    avatars,
    rendered,
    queued,
    publish,
    advance: (ms: number) => (now += ms),
    flush: () => new Promise<void>((r) => setImmediate(r)),
  };
}

test('boardVersion - rises with the event id and with avatars within one event; capped below the next event', () => {
  assert.equal(boardVersion(7, 0), 7 * AVATAR_REV_SPAN);
  assert.ok(boardVersion(7, 3) > boardVersion(7, 2));
  assert.ok(boardVersion(8, 0) > boardVersion(7, 5000), 'a later event always wins');
  assert.equal(boardVersion(7, 5000), 8 * AVATAR_REV_SPAN - 1);
});

test('ChatBoards - a board never waits for avatars; an avatar that arrives later makes a newer board with it', async () => {
  const r = rig();
  r.boards.watch(CHAT, 'chat');
  r.publish(1, 10, { 'tg:501': ['g.y..'], 'tg:502': ['.....'] });
  await r.flush();
  assert.deepEqual([...r.avatars.reads.keys()].sort(), [501, 502], 'reads start when players appear');
  await r.boards.tick();
  assert.equal(r.rendered.length, 1, 'rendered although no avatar has arrived');
  assert.ok(r.rendered[0]!.board.cards.every((c) => c.avatar === undefined));

  const photo = new Uint8Array([1, 2, 3]);
  r.avatars.pending.get(501)!(photo);
  r.avatars.pending.get(502)!(null); // no photo: nothing to redraw
  await r.flush();
  r.advance(3_000);
  await r.boards.tick();
  assert.equal(r.rendered.length, 2, 'the arrival made the chat dirty');
  const second = r.rendered[1]!;
  assert.ok(second.version > r.rendered[0]!.version);
  assert.deepEqual(second.board.cards.find((c) => c.id === '501')!.avatar, photo);
  assert.equal(second.board.cards.find((c) => c.id === '502')!.avatar, undefined);
  assert.deepEqual(r.queued, [r.rendered[0]!.version, second.version]);
  assert.deepEqual(
    r.rendered.map((x) => x.rank),
    [1_000_000, 1_000_000],
    'submitted with the chat’s rank, its last state change: the avatar does not move it',
  );

  r.advance(3_000);
  await r.boards.tick();
  assert.equal(r.rendered.length, 2, 'nothing changed: no render');
  r.boards.close();
});

test('ChatBoards - avatars are held for the puzzle: later guesses read nothing again; a new puzzle keeps only its players', async () => {
  const r = rig();
  r.boards.watch(CHAT, 'chat');
  r.publish(1, 10, { 'tg:501': ['g....'] });
  await r.flush();
  r.avatars.pending.get(501)!(new Uint8Array([9]));
  await r.flush();
  for (let ev = 2; ev < 6; ev++) r.publish(ev, 10, { 'tg:501': Array(ev).fill('g....') as string[] });
  await r.flush();
  assert.equal(r.avatars.reads.get(501), 1, 'held by the chat, not read per update');

  r.publish(6, 11, { 'tg:502': ['y....'] });
  await r.flush();
  r.publish(7, 11, { 'tg:502': ['y....'], 'tg:501': ['.....'] });
  await r.flush();
  assert.equal(r.avatars.reads.get(501), 2, 'dropped at the new puzzle (501 was not in it), read again when it came back');

  // An older or repeated update changes nothing.
  r.advance(10_000);
  await r.boards.tick();
  const n = r.rendered.length;
  r.publish(7, 11, { 'tg:999': ['.....'] });
  r.publish(3, 11, { 'tg:998': ['.....'] });
  await r.flush();
  r.advance(10_000);
  await r.boards.tick();
  assert.equal(r.rendered.length, n);
  assert.equal(r.avatars.reads.get(999), undefined);
  r.boards.close();
});

test('ChatBoards - with boards off (BOARDS_ENABLED=false) watch does nothing', async () => {
  const bus = new InProcessBus();
  const scheduler = new RefreshScheduler({
    renderBudgetMsPerS: 1000,
    sendBudgetPerS: 100,
    pacing: { groupRatePerMin: 20, groupBurst: 1, chatRatePerS: 1 },
    costMs: () => 5,
  });
  const boards = new ChatBoards({
    bus,
    subjects: subjects('cb-off'),
    client: {} as TelegramClient,
    renders: {} as RenderQueue,
    scheduler,
    telemetry,
    enabled: false,
  });
  boards.watch(CHAT, 'chat');
  assert.deepEqual(boards.watching, []);
});

test("ChatBoards - cluster mode: one gateway holds a chat's board; watch, stop and migration reach it wherever it runs, late ops are ignored", async () => {
  const bus = new InProcessBus();
  const subj = subjects('cb-cluster');
  const make = (gatewayId: string) =>
    new ChatBoards({
      bus,
      subjects: subj,
      client: {} as TelegramClient,
      renders: {} as RenderQueue,
      scheduler: new RefreshScheduler({
        renderBudgetMsPerS: 1000,
        sendBudgetPerS: 100,
        pacing: { groupRatePerMin: 20, groupBurst: 1, chatRatePerS: 1 },
        costMs: () => 5,
      }),
      telemetry,
      cluster: { gatewayId },
    });
  const a = make('A');
  const b = make('B');
  const settle = () => new Promise((r) => setImmediate(r));
  a.watch(CHAT, 'chat', 10); // /start handled by A
  await settle();
  assert.deepEqual([a.watching, b.watching], [[CHAT], []]);
  b.watch(CHAT, 'chat', 11); // /board handled by B: B holds it now, A dropped it
  await settle();
  assert.deepEqual([a.watching, b.watching], [[], [CHAT]]);
  // A's op of an earlier update that reaches B late changes nothing.
  bus.publish(subj.telegramBoards(), encodeJson({ op: 'watch', chat: CHAT, at: 10, by: 'A' }));
  bus.publish(subj.telegramBoards(), encodeJson({ op: 'unwatch', chat: CHAT, at: 9, by: 'C' }));
  bus.publish(subj.telegramBoards(), encodeJson({ op: 'unwatch', chat: 'x', at: 99, by: 'C' })); // malformed: ignored
  await settle();
  assert.deepEqual(b.watching, [CHAT]);
  a.move(CHAT, -100777, 12); // the migration handled by A: B's board moves
  await settle();
  assert.deepEqual([a.watching, b.watching], [[], [-100777]]);
  a.unwatch(-100777, 13); // /stop in the supergroup handled by A: B stops
  await settle();
  assert.deepEqual([a.watching, b.watching], [[], []]);
  a.close();
  b.close();
});

test('ChatBoards - a change that arrives while the budget is asked goes out in that board, and is not drawn again', async () => {
  const bus = new InProcessBus();
  const subj = subjects('cb-race');
  const now = 1_000_000;
  const rendered: Array<{ version: number; board: Board }> = [];
  const renders = {
    submit: (_chat: number, version: number, board: Board) => {
      rendered.push({ version, board });
      return Promise.resolve({ status: 'queued' });
    },
  } as unknown as RenderQueue;
  const client = { avatars: { get: () => Promise.resolve(null) } } as unknown as TelegramClient;
  const scheduler = new RefreshScheduler({
    renderBudgetMsPerS: 1000,
    sendBudgetPerS: 100,
    pacing: { groupRatePerMin: 20, groupBurst: 1, chatRatePerS: 1 },
    costMs: () => 5,
  });
  // The bot-wide budget (Redis in the cluster) answers later: the chat's state changes meanwhile.
  let grant: (n: number) => void = () => undefined;
  const budget = {
    kind: 'redis' as const,
    take: () => new Promise<{ granted: number; ahead: number }>((r) => (grant = (n) => r({ granted: n, ahead: 0 }))),
  };
  const boards = new ChatBoards({ bus, subjects: subj, client, renders, scheduler, budget, telemetry, now: () => now });
  const publish = (ev: number, marks: string[]): void =>
    bus.publish(
      subj.channelOut(telegramChannelId(CHAT)),
      encodeJson({
        t: 'update',
        channel: 'x',
        ev,
        at: now,
        actions: [],
        tally: {},
        game: { puzzle: 1, players: { 'tg:7': { marks, solved: false } } },
      }),
    );
  const flush = () => new Promise<void>((r) => setImmediate(r));
  boards.watch(CHAT, 'chat');
  publish(1, ['g....']);
  await flush();
  const ticking = boards.tick();
  await flush();
  publish(2, ['g....', 'gy...']); // arrives while the budget is asked
  await flush();
  grant(1);
  await ticking;
  assert.equal(rendered.length, 1);
  assert.equal(rendered[0]!.board.cards[0]!.rows.length, 2, 'the board drawn holds the newer state');
  assert.equal(rendered[0]!.version, boardVersion(2, 0), 'and goes out as that version');
  const again = boards.tick();
  await flush();
  grant(1);
  await again;
  assert.equal(rendered.length, 1, 'the same picture is not drawn and sent a second time');
  boards.close();
});

test('ChatBoards.latest / rendered - a render of a board that waited draws the chat as it is now; once that board is queued, the change is not handed on again', async () => {
  const r = rig();
  r.boards.watch(CHAT, 'chat');
  r.publish(1, 1, { 'tg:7': ['g....'] });
  await r.flush();
  await r.boards.tick();
  assert.deepEqual(r.queued, [boardVersion(1, 0)]);
  assert.equal(r.boards.latest(String(CHAT), boardVersion(1, 0)), null, 'nothing newer yet');
  // The board waits in the render queue; the chat changes meanwhile.
  r.publish(2, 1, { 'tg:7': ['g....', 'gy...'] });
  await r.flush();
  const fresh = r.boards.latest(String(CHAT), boardVersion(1, 0));
  assert.equal(fresh?.version, boardVersion(2, 0));
  assert.equal(fresh?.board.cards[0]!.rows.length, 2, 'the newer state, drawn by the waiting render');
  assert.equal(r.boards.latest(String(CHAT), boardVersion(2, 0)), null, 'not newer than itself');
  assert.equal(r.boards.latest('-1', 0), null, 'a chat this process does not hold');
  assert.equal(r.boards.latest('not a chat', 0), null);
  // A pure read: until that render's board is on the send queue, the change is still due (a failed render loses nothing).
  r.advance(10_000);
  await r.boards.tick();
  assert.deepEqual(r.queued, [boardVersion(1, 0), boardVersion(2, 0)]);
  // Once a late-bound board is queued for sending, its change is not handed on again.
  r.publish(3, 1, { 'tg:7': ['g....', 'gy...', 'ggg..'] });
  await r.flush();
  r.boards.rendered(CHAT, boardVersion(3, 0));
  r.boards.rendered(-1, 99); // a chat this process does not hold: nothing
  r.advance(10_000);
  await r.boards.tick();
  assert.deepEqual(r.queued, [boardVersion(1, 0), boardVersion(2, 0)], 'the change went out in that render: not handed on again');
  r.boards.close();
});

test('ChatBoards - after a group → supergroup move the first board in the new chat shows the moved state, merged until the new channel holds it', async () => {
  const bus = new InProcessBus();
  const subj = subjects('cb-move');
  let now = 1_000_000;
  const OLD = -4242;
  const NEW = -1004242;
  const rendered: Array<{ chat: number; version: number; board: Board }> = [];
  const renders = {
    submit: (chat: number, version: number, board: Board) => {
      rendered.push({ chat, version, board });
      return Promise.resolve({ status: 'queued' });
    },
  } as unknown as RenderQueue;
  const client = { avatars: { get: () => Promise.resolve(null) } } as unknown as TelegramClient;
  const scheduler = new RefreshScheduler({
    renderBudgetMsPerS: 1000,
    sendBudgetPerS: 100,
    pacing: { groupRatePerMin: 20, groupBurst: 1, chatRatePerS: 1 },
    costMs: () => 5,
  });
  const boards = new ChatBoards({ bus, subjects: subj, client, renders, scheduler, telemetry, now: () => now });
  const publish = (chat: number, ev: number, players: Record<string, { marks: string[]; solved?: boolean }>): void =>
    bus.publish(
      subj.channelOut(telegramChannelId(chat)),
      encodeJson({
        t: 'update',
        channel: 'x',
        ev,
        at: now,
        actions: [],
        tally: {},
        game: { puzzle: 3, players: Object.fromEntries(Object.entries(players).map(([v, p]) => [v, { solved: false, ...p }])) },
      }),
    );
  const flush = () => new Promise<void>((r) => setImmediate(r));
  const rows = (b: Board): Record<string, number> => Object.fromEntries(b.cards.map((c) => [c.id, c.rows.length]));
  boards.watch(OLD, 'group');
  publish(OLD, 900, { 'tg:7': { marks: ['g....', 'gy...'] }, 'tg:8': { marks: ['y....'] } });
  await flush();
  await boards.tick();
  assert.deepEqual(
    rendered.map((x) => x.chat),
    [OLD],
  );

  boards.move(OLD, NEW);
  now += 10;
  await boards.tick();
  assert.equal(rendered.length, 2, "the new chat's board is due at once");
  const first = rendered[1]!;
  assert.equal(first.chat, NEW);
  assert.deepEqual(rows(first.board), { '7': 2, '8': 1 }, 'the first board in the new chat shows the moved state');
  assert.ok(first.version > rendered[0]!.version, "newer than any of the old chat's boards");

  // The new chat's channel before the state moved in (one player of its own): shown merged.
  publish(NEW, 5, { 'tg:9': { marks: ['.....'] }, 'tg:8': { marks: [] } });
  await flush();
  now += 3_000;
  await boards.tick();
  assert.deepEqual(rows(rendered[2]!.board), { '7': 2, '8': 1, '9': 1 });
  assert.ok(rendered[2]!.version > first.version);
  // The router merged it in: the channel alone from now on.
  publish(NEW, 6, { 'tg:9': { marks: ['.....'] }, 'tg:8': { marks: ['y....'] }, 'tg:7': { marks: ['g....', 'gy...'] } });
  await flush();
  now += 3_000;
  await boards.tick();
  publish(NEW, 7, { 'tg:9': { marks: ['.....'] }, 'tg:8': { marks: ['y....'] } }); // (a player left the new channel's state)
  await flush();
  now += 3_000;
  await boards.tick();
  assert.deepEqual(rows(rendered[4]!.board), { '8': 1, '9': 1 }, 'the moved state is no longer carried');
  assert.deepEqual(boards.watching, [NEW]);
  boards.close();
});

/** The render worker's hooks as one process wires them: each board's end reaches `boards.heard`. */
function endsTo(boards: ChatBoards): ReturnType<typeof publishingHooks> {
  const ends = new LocalBoardEnds();
  ends.subscribe((end) => boards.heard(end));
  return publishingHooks(ends);
}

test('ChatBoards.heard - a board not delivered makes its chat due again; a deactivated chat stops', async () => {
  const r = rig();
  const hooks = endsTo(r.boards);
  r.boards.watch(CHAT, 'chat');
  r.publish(1, 1, { 'tg:7': ['g....'] });
  await r.flush();
  await r.boards.tick();
  const v = r.queued[0]!;
  r.advance(3_000);
  await r.boards.tick();
  assert.equal(r.queued.length, 1, 'handed on: not due');
  hooks.onQueued(CHAT, v, { status: 'queued', id: 'j1', result: Promise.resolve({ status: 'failed', reason: 'retries exhausted' }) });
  await r.flush();
  await r.boards.tick();
  assert.deepEqual(r.queued, [v, v], 'the failed board is handed on again');
  hooks.onQueued(CHAT, v, { status: 'queued', id: 'j2', result: Promise.resolve({ status: 'sent' }) });
  await r.flush();
  r.advance(3_000);
  await r.boards.tick();
  assert.equal(r.queued.length, 2, 'delivered: clean');
  hooks.onQueued(CHAT, v, { status: 'refused', reason: 'deactivated' });
  assert.deepEqual(r.boards.watching, []);
  r.publish(2, 1, { 'tg:7': ['g....', 'g....'] });
  await r.flush();
  r.advance(3_000);
  await r.boards.tick();
  assert.equal(r.queued.length, 2, 'nothing rendered for a deactivated chat');
  r.boards.close();
});

test('ChatBoards.heard - a board whose render threw makes its chat due again at the next pass', async () => {
  const r = rig();
  const hooks = endsTo(r.boards);
  r.boards.watch(CHAT, 'chat');
  r.publish(1, 1, { 'tg:7': ['g....'] });
  await r.flush();
  await r.boards.tick();
  r.advance(3_000);
  await r.boards.tick();
  assert.equal(r.queued.length, 1, 'handed on: not due');
  hooks.onFailed(CHAT, r.queued[0]!);
  hooks.onFailed(-1, 1); // a chat this process does not hold: nothing
  await r.boards.tick();
  assert.equal(r.queued.length, 2, 'handed on again');
  r.boards.close();
});

test('ChatBoards - the board draws the live round and the last result; its strips count in the render cost', async () => {
  const r = rig();
  r.boards.watch(CHAT, 'chat');
  const round = (id: string, state: RoundView['state'], deadline: number, extra: Partial<RoundView> = {}): RoundView => ({
    id,
    kind: 'pool',
    title: `Q ${id}`,
    outcomes: ['yes', 'no'],
    labels: { yes: 'Yes', no: 'No' },
    state,
    openedAt: 0,
    deadline,
    pool: [30, 10],
    entries: 2,
    ...extra,
  });
  r.publish(1, 10, { 'tg:501': ['g....'] }, [
    round('puzzle-9', 'settled', 100, { winner: 'no' }),
    round('old', 'cancelled', 50),
    round('puzzle-10', 'open', 200),
  ]);
  await r.flush();
  await r.boards.tick();
  assert.deepEqual(r.rendered[0]!.board.rounds, [
    {
      title: 'Q puzzle-10',
      kind: 'pool',
      state: 'open',
      outcomes: [
        { label: 'Yes', value: 30 },
        { label: 'No', value: 10 },
      ],
    },
    {
      title: 'Q puzzle-9',
      kind: 'pool',
      state: 'settled',
      winner: 1,
      outcomes: [
        { label: 'Yes', value: 30 },
        { label: 'No', value: 10 },
      ],
    },
  ]);
  assert.deepEqual(r.costs.at(-1), [1, 2], 'the cost of one card and two strips');
  // The round settles: a newer board with the result alone.
  r.publish(2, 10, { 'tg:501': ['g....'] }, [round('puzzle-10', 'settled', 200, { winner: 'yes' })]);
  await r.flush();
  r.advance(3_000);
  await r.boards.tick();
  assert.equal(r.rendered.length, 2);
  assert.deepEqual(
    r.rendered[1]!.board.rounds?.map((x) => [x.title, x.state, x.winner]),
    [['Q puzzle-10', 'settled', 0]],
  );
  // No rounds (PUZZLE_ROUND off): no strips.
  r.publish(3, 10, { 'tg:501': ['g....', 'ggggg'] });
  await r.flush();
  r.advance(3_000);
  await r.boards.tick();
  assert.equal(r.rendered[2]!.board.rounds, undefined);
  assert.deepEqual(r.costs.at(-1), [1, 0]);
  r.boards.close();
});
