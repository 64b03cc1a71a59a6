// @ts-check
// A first crowdplay game: the crowd votes `red` or `blue`; a pool round asks
// which colour gets more votes; at the deadline the game settles the round
// on that colour and the winners share the pool. docs/guides/first-game.md
// explains every step.
//
//   node game.js        (with a crowdplay server on CROWDPLAY_URL, default http://127.0.0.1:8080)
import { GameClient } from '@crowdplay/sdk-game';

// 1. Where to connect, and as whom: a tenant's API key (this is the dev
//    tenant's, which `npm start` creates) and a channel, which the first
//    game connection creates.
const url = process.env.CROWDPLAY_URL ?? 'http://127.0.0.1:8080';
const apiKey = process.env.CROWDPLAY_API_KEY ?? 'cpk_dev_0123456789abcdef0123456789abcdef';
const channel = process.env.CROWDPLAY_CHANNEL ?? 'first-game';
const roundMs = Number(process.env.ROUND_MS ?? 30_000);

const game = new GameClient({ url, channel, apiKey });
game.on('error', (err) => console.error(`error ${err.code}: ${err.message}`));

// 2. Batches: once per tick (250 ms) while viewers press, the game gets what
//    they pressed: per action a tally by option (and the first maxPerTick
//    presses one by one). The game keeps its own score from them.
const votes = { red: 0, blue: 0 };
game.on('batch', (batch) => {
  const tally = batch.actions.vote?.tally ?? {};
  votes.red += tally.red ?? 0;
  votes.blue += tally.blue ?? 0;
  console.log(`batch ev=${batch.ev}: red +${tally.red ?? 0}, blue +${tally.blue ?? 0} (red ${votes.red}, blue ${votes.blue})`);
  game.publishState({ votes }); // shown to every viewer in the channel's next update
});

// 3. Connect, then declare the actions viewers may press, with 1,000 points
//    for each new viewer to stake with.
try {
  await game.connect();
} catch (err) {
  // Refused for good (a wrong key, another game on the channel) or no server within connectTimeoutMs (60 s).
  const { code = 'error', message = String(err) } = /** @type {{ code?: string, message?: string }} */ (err);
  console.error(`game: cannot connect: ${code}: ${message}`);
  process.exit(1);
}
// Names are identifiers; labels are what viewers read (any script, at most 64 characters).
const colours = { red: 'Red', blue: 'Blue' };
game.declare([{ name: 'vote', label: 'Vote', options: ['red', 'blue'], optionLabels: colours, maxPerTick: 100 }], { welcomeGrant: 1_000 });
console.log(`declared vote (red, blue) on channel ${channel}`);

// 4. Open a round: a pool on which colour wins, with the question viewers
//    see; stakes close at the deadline.
const opened = await game.openRound({
  round: `r${Date.now()}`,
  kind: 'pool',
  outcomes: ['red', 'blue'],
  title: 'Which colour gets more votes?',
  labels: colours,
  durationMs: roundMs,
});
console.log(`round ${opened.id} open until ${new Date(opened.deadline).toISOString()}: vote and stake now`);
console.log(`it asks "${opened.title}"`);

// 5. At the deadline the server locks the round; the game decides the
//    winner and settles, which pays the winners from the pool.
game.on('round', (round) => {
  if (round.id !== opened.id) return;
  if (round.state === 'cancelled') {
    // The server cancels (and refunds) a round it cannot finish: a drain with no shard to take the channel.
    console.log(`round ${round.id} was cancelled: every stake refunded`);
    void game.close();
    return;
  }
  if (round.state !== 'locked') return;
  const winner = votes.blue > votes.red ? 'blue' : 'red';
  game.settleRound(round.id, winner).then(
    async (settled) => {
      console.log(`round ${settled.id} settled: ${settled.winner} wins, pool ${JSON.stringify(settled.pool)}, ${settled.entries} stakes`);
      await game.close();
    },
    (err) => {
      console.error(`settle failed: ${err.code ?? err}`);
      process.exitCode = 1;
      void game.close();
    },
  );
});
