// @ts-check
// Stand-in viewers for the first game (a browser on the viewer page does the
// same): each gets a dev token, joins the channel, votes, stakes on the open
// round and waits for it to be settled.
//
//   node crowd.js [viewers]   (default 3; needs the standalone server: POST /v1/tokens/dev)
import WebSocket from 'ws';
import { ViewerClient } from '@crowdplay/sdk-viewer';

const url = process.env.CROWDPLAY_URL ?? 'http://127.0.0.1:8080';
const channel = process.env.CROWDPLAY_CHANNEL ?? 'first-game';
const count = Number(process.argv[2] ?? 3);

/**
 * One viewer: a dev token (standalone only; a tenant's backend signs real ones), then the SDK.
 * @param {number} i the viewer's number
 * @returns {Promise<void>} once the round it staked on is settled
 */
async function viewer(i) {
  const res = await fetch(`${url}/v1/tokens/dev`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ channel, viewer: `fan-${i}` }),
  });
  if (!res.ok) throw new Error(`POST /v1/tokens/dev answered ${res.status}: ${await res.text()}`);
  const { token } = await res.json();
  // Node 20 has no global WebSocket: hand the SDK the `ws` class (a browser needs none).
  const client = new ViewerClient({ url, channel, token, WebSocket });
  // Every update carries the channel's rounds; `round(pick)` waits for the first update where `pick` finds one.
  /** @type {import('@crowdplay/sdk-viewer').ChannelUpdate | null} */
  let latest = null;
  /** @type {Set<() => void>} */
  const waiting = new Set();
  client.on('update', (update) => {
    latest = update;
    for (const check of [...waiting]) check();
  });
  /**
   * @param {(r: import('@crowdplay/sdk-viewer').RoundView) => boolean} pick
   * @returns {Promise<import('@crowdplay/sdk-viewer').RoundView>}
   */
  const round = (pick) =>
    new Promise((resolve) => {
      const check = () => {
        const found = latest?.rounds?.find(pick);
        if (!found) return;
        waiting.delete(check);
        resolve(found);
      };
      waiting.add(check);
      check();
    });

  // Once the round is paid, the server tells each viewer that took part its own result.
  /** @type {Map<string, import('@crowdplay/sdk-viewer').RoundResultFrame>} round id → this viewer's result */
  const results = new Map();
  /** @type {() => void} */
  let onResult = () => undefined;
  client.on('roundResult', (frame) => {
    results.set(frame.round, frame);
    onResult();
  });

  await client.connect();
  const open = await round((r) => r.state === 'open');
  const pick = i % 3 === 0 ? 'red' : 'blue';
  for (let n = 0; n < 3; n++) await client.act('vote', pick);
  const ack = await client.stake(open.id, pick, 100);
  console.log(`fan-${i} voted ${pick} 3 times, staked 100 on ${pick}: ${ack.ok ? `balance ${ack.balance}` : ack.code}`);
  const done = await round((r) => r.id === open.id && (r.state === 'settled' || r.state === 'cancelled'));
  if (!results.has(done.id)) await new Promise((resolve) => (onResult = () => results.has(done.id) && resolve(undefined)));
  const net = results.get(done.id)?.net ?? 0;
  const outcome = net > 0 ? `you won ${net}` : net < 0 ? `you lost ${-net}` : 'you broke even';
  const winner = done.winner === undefined ? 'none' : (done.labels?.[done.winner] ?? done.winner);
  console.log(`fan-${i} saw round ${done.id} ${done.state} (winner ${winner}): ${outcome}; balance ${client.balance}`);
  await client.close();
}

// Give up after two minutes rather than wait forever (no server, no game).
setTimeout(() => {
  console.error('crowd: no settled round within 2 minutes');
  process.exit(1);
}, 120_000).unref();

await Promise.all(Array.from({ length: count }, (_, i) => viewer(i + 1)));
