/**
 * A Telegram group plays the word puzzle's round of the day end to end,
 * against the Bot API stub: /start through the webhook → two players open
 * the Mini App link and stake → one solves the word → the game settles the
 * round, the winner is paid, and the bot posts one result message in the
 * chat (transactional lane) beside the live board.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { answerFor, fiveLetterWords } from '@crowdplay/crowd-engine';
import { verifyLedger } from '@crowdplay/ledger';
import { signInitData } from '@crowdplay/telegram';
import { TelegramStub } from '@crowdplay/telegram/testing';
import { openSocket, startStandalone, until, type Frame, type InProcess } from '../helpers.ts';

const TOKEN = '424243:TEST-token-for-the-chat-round-suite';
const HOOK_SECRET = 'hook-secret-for-round-tests';
const CHAT = -1005560001;

describe('Telegram group chat: the round of the day', () => {
  let stub: TelegramStub;
  let s: InProcess;
  before(async () => {
    stub = new TelegramStub();
    const root = await stub.listen();
    s = await startStandalone({
      telegram: { botToken: TOKEN, webhookSecret: HOOK_SECRET, apiRoot: root, botUsername: 'cp_round_bot', appName: 'play' },
      puzzle: { round: 'pool', roundGuesses: 4, welcomeGrant: 100 },
    });
  });
  after(async () => {
    await s?.stop();
    await stub?.close();
  });

  it('stakes through the Mini App, a solve settles the round, the winner is paid and the chat gets one result message', async () => {
    const r = await fetch(`${s.baseUrl}/v1/telegram/webhook`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-telegram-bot-api-secret-token': HOOK_SECRET },
      body: JSON.stringify({
        update_id: 1,
        message: { message_id: 1, date: 1, chat: { id: CHAT, type: 'supergroup', title: 'Crew' }, text: '/start' },
      }),
    });
    assert.equal(r.status, 200);
    const reply = await until(() => stub.messages(CHAT).find((m) => m.fromBot && m.kind === 'text'), 'the /start reply');
    const startParam = new URL(/"url":"([^"]+)"/.exec(reply.markup)![1]!).searchParams.get('startapp')!;
    const join = (id: number) =>
      openSocket(
        `${s.baseUrl.replace('http', 'ws')}/v1/ws?role=crowd&initData=${encodeURIComponent(
          signInitData({ user: { id, first_name: `P${id}` }, chat_type: 'supergroup', start_param: startParam }, { botToken: TOKEN }),
        )}`,
      );
    const roundOf = (f: Frame) => (f.rounds as Array<{ id: string; state: string; winner?: string }> | undefined)?.[0];
    const [ann, bob] = [join(71), join(72)];
    const u = await ann.next((f) => f.t === 'update' && roundOf(f)?.state === 'open');
    const round = roundOf(u)!.id;
    for (const [c, outcome, points] of [
      [ann, 'yes', 40],
      [bob, 'no', 10],
    ] as const) {
      await c.next((f) => f.t === 'balance' && f.points === 100);
      c.send({ t: 'stake', seq: 1, round, outcome, points });
      assert.equal((await c.next((f) => f.t === 'ack' && f.seq === 1)).ok, true);
    }
    const puzzle = (u.game as { puzzle: number }).puzzle;
    ann.send({ t: 'guess', seq: 2, word: answerFor(puzzle, fiveLetterWords().answers, s.config.puzzle.secret) });
    assert.equal((await ann.next((f) => f.t === 'ack' && f.seq === 2)).solved, true);
    const won = await ann.next((f) => f.t === 'roundResult');
    assert.deepEqual([won.winner, won.net], ['yes', 10]);
    assert.equal((await bob.next((f) => f.t === 'roundResult')).net, -10);

    const result = await until(
      () => stub.messages(CHAT).find((m) => m.fromBot && m.kind === 'text' && m.text?.startsWith('Round result')),
      'the result message',
      15_000,
    );
    assert.equal(
      result.text,
      `Round result: Will someone here solve today's word in 4 guesses or fewer before betting closes?\nWinner: Yes, in 4 or fewer. 50 points shared by the winners.`,
    );
    // A board goes out after the result message (drawn from the chat's newest state: the result on it).
    const sentAt = (re: RegExp) => stub.calls().findLastIndex((c) => re.test(c.method) && c.chatId === CHAT && c.outcome === 'ok');
    await until(() => sentAt(/^(sendPhoto|editMessageMedia)$/) > sentAt(/^sendMessage$/), 'a board after the result', 15_000);
    // The result message was posted once, with no 429.
    assert.equal(stub.messages(CHAT).filter((m) => m.fromBot && m.text?.startsWith('Round result')).length, 1);
    assert.equal(stub.stats().rejected429, 0);
    assert.match(await s.running.telemetry.metrics.prometheusText(), /crowdplay_telegram_round_results_total\{outcome="settled"[^}]*\} 1/);
    assert.deepEqual((await verifyLedger(s.running.store.db)).failures, []);
    ann.close();
    bob.close();
  });
});
