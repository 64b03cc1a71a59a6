/**
 * A chat's round through the Mini App's socket (PUZZLE_ROUND on): a player
 * of the chat stakes with the welcome grant, and a player whose initData
 * names another chat cannot stake in it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { signInitData, startParamFor, startParamSecret } from '@crowdplay/telegram';
import { openSocket as open, openWelcomed, startStandalone, type Frame, type InProcess } from '../helpers.ts';

const BOT_TOKEN = '123456780:TEST-token-for-the-round-suite';
const CHAT_A = -1001234567001;
const CHAT_B = -1001234567002;

interface RoundOf {
  id: string;
  state: string;
  pool?: number[];
  entries: number;
}
const roundIn = (f: Frame): RoundOf | undefined => (f.rounds as RoundOf[] | undefined)?.find((r) => r.id.startsWith('puzzle-'));

describe('Mini App rounds (initData) → the chat round', () => {
  let s: InProcess;
  const secret = startParamSecret(BOT_TOKEN);
  const initData = (chatId: number, userId: number): string =>
    signInitData(
      { user: { id: userId, first_name: `U${userId}` }, chat_type: 'supergroup', start_param: startParamFor(chatId, secret) },
      { botToken: BOT_TOKEN },
    );
  const url = (q: Record<string, string>): string =>
    `${s.baseUrl.replace('http', 'ws')}/v1/ws?${new URLSearchParams({ role: 'crowd', ...q }).toString()}`;

  before(async () => {
    s = await startStandalone({
      telegram: { botToken: BOT_TOKEN, webhookSecret: 'hook-secret', apiRoot: 'http://127.0.0.1:9' },
      puzzle: { round: 'pool', welcomeGrant: 50 },
    });
  });
  after(() => s?.stop());

  it("a stake whose initData names another chat is refused with its code and changes neither chat's round nor the wallet", async () => {
    // Chat B's own player stakes 20 of the 50 granted (the channel's first join: a retryable refusal is asked again).
    const { socket: b } = await openWelcomed(url({ initData: initData(CHAT_B, 81) }));
    const u = await b.next((f) => f.t === 'update' && roundIn(f)?.state === 'open');
    const round = roundIn(u)!.id;
    await b.next((f) => f.t === 'balance' && f.points === 50);
    b.send({ t: 'stake', seq: 1, round, outcome: 'no', points: 20 });
    const ok = await b.next((f) => f.t === 'ack' && f.seq === 1);
    assert.deepEqual([ok.ok, ok.balance], [true, 30]);
    await b.next((f) => f.t === 'update' && roundIn(f)?.entries === 1);

    // A player with chat A's initData asks for chat B's channel and stakes at once: refused before any frame is read.
    const x = open(url({ initData: initData(CHAT_A, 82), channel: `tgn${-CHAT_B}` }));
    x.ws.on('open', () => x.send({ t: 'stake', seq: 1, round, outcome: 'yes', points: 10 }));
    assert.equal(await x.closed, 4003);
    assert.equal(x.frames.find((f) => f.t === 'error')?.code, 'CP_ERR_INITDATA_WRONG_CHAT');
    assert.deepEqual(
      x.frames.filter((f) => f.t !== 'error'),
      [],
      'no welcome, no ack',
    );

    // Nothing changed in chat B: a new socket's first update shows the one stake; the stranger was granted nothing there.
    const again = open(url({ initData: initData(CHAT_B, 83) }));
    const snap = await again.next((f) => f.t === 'update' && roundIn(f) !== undefined);
    assert.deepEqual([roundIn(snap)!.entries, roundIn(snap)!.pool], [1, [0, 20]]);
    const { socket: own } = await openWelcomed(url({ initData: initData(CHAT_A, 82) }));
    const welcome = await own.next((f) => f.t === 'balance');
    assert.deepEqual([welcome.points, welcome.reason], [50, 'welcome'], "only chat A's grant: nothing was paid or charged in chat B");
    for (const c of [b, again, own]) c.close();
  });
});
