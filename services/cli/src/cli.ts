/**
 * The `crowdplay` command.
 *
 *   crowdplay start                      every service in one process (npm start)
 *   crowdplay service <name>             one service: gateway | router | crowd-engine | sequencer | telegram-sender | board-renderer
 *   crowdplay cluster --gateways G --shards S --routers R   a local cluster: one process per service (npm run cluster)
 *   crowdplay tenant create <id> [--name NAME]
 *   crowdplay tenant rotate-key <id>
 *   crowdplay tenant rotate-secret <id>
 *   crowdplay tenant list
 *   crowdplay tenant quota <id> [--channels N] [--connections N] [--intents-per-s N] [--grants-per-day N] [--clear NAME]
 *                                        show a tenant's effective quotas, or set (N) or remove (default, --clear) overrides
 *   crowdplay tenant bot set <id> --token TOKEN --webhook-secret SECRET | bot list <id> | bot remove <id> <bot id>
 *                                        a tenant's own Telegram bots (tenant-bot.ts)
 *   crowdplay ledger verify              check every ledger invariant; exit 1 and list each failure
 *   crowdplay telegram setup --public-url https://HOST [--dry-run] [--deadline-s S] [--tenant-bot BOT_ID]
 *                                        the bot's webhook, commands and menu button, then a check (telegram-setup.ts);
 *                                        --tenant-bot: a tenant's own bot, read from the database
 *   crowdplay settings                   the settings table (Markdown)
 *
 * Run through main.ts, which sets the allocator defaults first. With main.ts,
 * the only place that reads process.env: it becomes the frozen Config here.
 */
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { loadConfig, settingsTable, type Config } from '@crowdplay/config';
import { CrowdplayError, isCrowdplayError } from '@crowdplay/protocol';
import { verifyLedger } from '@crowdplay/ledger';
import { newTenantIdProblem, tenantIdProblem, tenantNameProblem } from '@crowdplay/store';
import { SERVICES, startServices, type ServiceName } from './compose.ts';
import { startCluster } from './cluster.ts';
import { connectStore } from './connect.ts';
import { runUntilSignal, startHealthServer, type HealthServer } from './health.ts';
import { niceHelperThreads } from './threads.ts';
import { processStartSettings, releaseSemiSpaceFlag } from './allocator.ts';
import { SETUP_DEADLINE_S, telegramSetup } from './telegram-setup.ts';
import { parseQuotaFlags, QUOTA_FLAGS, tenantQuota } from './tenant-quota.ts';
import { parseBotId, parseBotSetFlags, tenantBotList, tenantBotRemove, tenantBotSet, type BotSetInput } from './tenant-bot.ts';
import { openTenantBot } from './tenant-bots.ts';
import { tenantBotWebhookPath } from '@crowdplay/gateway';

const USAGE = `usage:
  crowdplay start
  crowdplay service <${SERVICES.join('|')}>
  crowdplay cluster [--gateways G] [--shards S] [--routers R] [--renderers R]
  crowdplay tenant create <id> [--name NAME] | rotate-key <id> | rotate-secret <id> | list
  crowdplay tenant quota <id> [--channels N] [--connections N] [--intents-per-s N] [--grants-per-day N] [--bots N] [--clear NAME|all]
  crowdplay tenant bot set <id> --token TOKEN --webhook-secret SECRET | bot list <id> | bot remove <id> <bot id>
  crowdplay ledger verify
  crowdplay telegram setup --public-url https://HOST [--dry-run] [--deadline-s S] [--tenant-bot BOT_ID]
  crowdplay settings`;

/**
 * node's parseArgs refusal in crowdplay's words: node's own text quotes the option unevenly and speaks of
 * positionals; this names the option and what it needs.
 * @param err what parseArgs threw (ERR_PARSE_ARGS_UNKNOWN_OPTION, ERR_PARSE_ARGS_INVALID_OPTION_VALUE, …)
 * @returns one line, without the `crowdplay: ` prefix
 */
export function argsProblem(err: unknown): string {
  const code = (err as { code?: unknown }).code;
  const msg = err instanceof Error ? err.message : String(err);
  const opt = /'(-{1,2}[A-Za-z0-9][A-Za-z0-9-]*)/.exec(msg)?.[1];
  if (opt === undefined) return msg.split('\n')[0]!;
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return `unknown option ${opt}`;
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    if (/argument missing/.test(msg)) return `option ${opt} needs a value`;
    if (/ambiguous/.test(msg)) return `option ${opt} needs a value; one that starts with "-" is given as ${opt}=VALUE`;
    if (/does not take an argument/.test(msg)) return `option ${opt} takes no value`;
  }
  return msg.split('\n')[0]!;
}

function fail(msg: string, code = 2): never {
  process.stderr.write(`${msg}\n`);
  process.exit(code);
}

/** `crowdplay tenant <sub>` words other than `bot`; every one but `list` takes a tenant id. */
const TENANT_SUBCOMMANDS = ['create', 'rotate-key', 'rotate-secret', 'list', 'quota'] as const;

/** The quota flags as parsed: each `--channels` … value, and the `--clear` names. */
interface QuotaFlagValues {
  values: Partial<Record<string, string>>;
  clear: string[];
}

async function tenantCommand(
  config: Config,
  args: string[],
  name: string | undefined,
  quotaFlags: QuotaFlagValues,
  botFlags: BotSetInput,
): Promise<void> {
  const [sub, id] = args;
  if (sub === 'bot') return tenantBotCommand(config, args.slice(1), botFlags);
  // What to do and to which tenant is checked before the store is opened: a wrong word gets the usage, not a store error.
  if (sub === undefined) fail(`crowdplay tenant: name what to do (${TENANT_SUBCOMMANDS.join(', ')}, bot)\n${USAGE}`);
  if (!(TENANT_SUBCOMMANDS as readonly string[]).includes(sub)) fail(`crowdplay tenant: unknown subcommand "${sub}"\n${USAGE}`);
  if (args.length > 2 || (sub === 'list' && id !== undefined))
    fail(`crowdplay tenant ${sub}: unexpected argument "${args[sub === 'list' ? 1 : 2]}"\n${USAGE}`);
  if (sub !== 'list') {
    if (id === undefined) fail(`crowdplay tenant ${sub}: a tenant id is required\n${USAGE}`);
    const why = sub === 'create' ? newTenantIdProblem(id) : tenantIdProblem(id);
    if (why) fail(`crowdplay tenant ${sub}: ${why}`);
  }
  let patch;
  if (sub === 'quota') {
    try {
      // Checked before the store is opened: bad input reads and writes nothing.
      patch = parseQuotaFlags(quotaFlags.values, quotaFlags.clear);
    } catch (err) {
      if (isCrowdplayError(err)) fail(`crowdplay tenant quota: ${err.code}: ${err.message}\n${USAGE}`);
      throw err;
    }
  }
  // Checked before the store is opened, as the quota flags are: the name is printed to terminals as it is.
  if (sub === 'create' && name !== undefined) {
    const why = tenantNameProblem(name);
    if (why) fail(`crowdplay tenant create: --name: ${why}`);
  }
  const store = await connectStore(config);
  try {
    if (sub === 'quota' && id && patch) {
      process.stdout.write(await tenantQuota(store, config, id, patch));
    } else if (sub === 'create' && id) {
      const { tenant, apiKey } = await store.tenants.create(id, name ?? id);
      process.stdout.write(
        `tenant:         ${tenant.id}\nname:           ${tenant.name}\napi key:        ${apiKey}\nsigning secret: ${tenant.signingSecret}\n` +
          `(the API key is shown only now; store it safely)\n`,
      );
    } else if (sub === 'rotate-secret' && id) {
      const tenant = await store.tenants.rotateSecret(id);
      process.stdout.write(
        `tenant:         ${tenant.id}\nsigning secret: ${tenant.signingSecret}\n(tokens signed with the old secret stop working within 5 s)\n`,
      );
    } else if (sub === 'rotate-key' && id) {
      const { tenant, apiKey } = await store.tenants.rotateKey(id);
      process.stdout.write(`tenant:  ${tenant.id}\napi key: ${apiKey}\n(the old key no longer works)\n`);
    } else if (sub === 'list' && !id) {
      const list = await store.tenants.list();
      for (const t of list) process.stdout.write(`${t.id}\t${t.name}\t${t.apiKeyPrefix}…\t${t.createdAt.toISOString()}\n`);
      if (list.length === 0) process.stdout.write('(no tenants)\n');
    } else fail(USAGE);
  } catch (err) {
    const e = err as { code?: string; message?: string };
    if (e.code === '23505') {
      const exists = new CrowdplayError('CP_ERR_TENANT_EXISTS', [id]);
      fail(`crowdplay tenant ${sub}: ${exists.code}: ${exists.message} (crowdplay tenant rotate-key ${id} issues a new key)`, 1);
    }
    if (isCrowdplayError(err)) fail(`crowdplay tenant ${sub}: ${err.code}: ${err.message}`, 1);
    if (err instanceof TypeError) fail(`crowdplay tenant ${sub}: ${e.message ?? String(err)}`, 1);
    throw err;
  } finally {
    await store.close();
  }
}

/** `crowdplay tenant bot set|list|remove` (tenant-bot.ts): exit 2 on bad input before anything is opened, 1 on a refusal. */
async function tenantBotCommand(config: Config, args: string[], flags: BotSetInput): Promise<void> {
  const [op, tenant, botId] = args;
  const arity: Record<string, number> = { set: 2, list: 2, remove: 3 };
  if (!op || arity[op] === undefined)
    fail(`crowdplay tenant bot: ${op ? `unknown subcommand "${op}"` : 'name what to do'} (set, list, remove)\n${USAGE}`);
  if (arity[op] !== args.length)
    fail(
      `crowdplay tenant bot ${op}: ${args.length < arity[op]! ? (tenant === undefined ? 'a tenant id is required' : 'a bot id is required') : `unexpected argument "${args[arity[op]!]}"`}\n${USAGE}`,
    );
  if (tenant === undefined) fail(USAGE);
  const why = tenantIdProblem(tenant);
  if (why) fail(`crowdplay tenant bot ${op}: ${why}`);
  if (op === 'remove') {
    try {
      // Checked before the store is opened: bad input reads and writes nothing.
      parseBotId(botId ?? '');
    } catch (err) {
      if (isCrowdplayError(err)) fail(`crowdplay tenant bot remove: ${err.code}: ${err.message}`);
      throw err;
    }
  }
  let input;
  if (op === 'set') {
    try {
      // Checked before the store is opened or Telegram asked: bad input reads and writes nothing.
      input = parseBotSetFlags(flags);
    } catch (err) {
      if (isCrowdplayError(err)) fail(`crowdplay tenant bot set: ${err.code}: ${err.message}\n${USAGE}`);
      throw err;
    }
  }
  const store = await connectStore(config);
  try {
    if (op === 'set' && input) process.stdout.write(await tenantBotSet(store, config, tenant, input));
    else if (op === 'list') process.stdout.write(await tenantBotList(store, tenant));
    else if (op === 'remove' && botId !== undefined) process.stdout.write(await tenantBotRemove(store, tenant, botId));
  } catch (err) {
    if (isCrowdplayError(err)) fail(`crowdplay tenant bot ${op}: ${err.code}: ${err.message}`, 1);
    throw err;
  } finally {
    await store.close();
  }
}

/**
 * `crowdplay cluster`: starts the children (this same entry, `service <name>`), prints their URLs, exits 1 when one
 * dies unexpectedly (naming it), and drains them in order on SIGINT / SIGTERM (a second signal kills them).
 */
async function clusterCommand(gateways: number, shards: number, routers: number, renderers: number): Promise<void> {
  // A signal while the children start: exit, and the exit hook of startCluster kills whatever started.
  const early = (): never => process.exit(130);
  process.once('SIGINT', early);
  process.once('SIGTERM', early);
  let cluster;
  try {
    cluster = await startCluster({
      gateways,
      shards,
      routers,
      renderers,
      env: process.env,
      entry: { execArgv: process.execArgv, script: process.argv[1]! },
    });
  } catch (err) {
    fail(`crowdplay cluster: ${err instanceof Error ? err.message : String(err)}`, err instanceof TypeError ? 2 : 1);
  }
  const c = cluster;
  process.off('SIGINT', early);
  process.off('SIGTERM', early);
  process.stdout.write(
    `crowdplay cluster: ${shards} shard(s), ${gateways} gateway(s), ${routers} router(s)\n${c.gatewayUrls.map((u) => `  ${u}`).join('\n')}\n`,
  );
  // Each child's operator listener on a port of its own: HEALTH_PORT + its index in start order (cluster.ts childEnv).
  const health = c.processes.filter((p) => p.healthPort !== undefined);
  if (health.length > 0) {
    const host = c.env.HEALTH_HOST ?? '127.0.0.1';
    process.stdout.write(
      `crowdplay cluster: /healthz, /readyz and /metrics of each process (HEALTH_PORT + its index)\n${health
        .map((p) => `  ${p.name.padEnd(11)} http://${host.includes(':') ? `[${host}]` : host}:${p.healthPort}`)
        .join('\n')}\n`,
    );
  }
  let signals = 0;
  const onSignal = (): void => {
    if (++signals > 1) {
      for (const p of c.processes) p.signal('SIGKILL');
      process.exit(130);
    }
    process.stdout.write('crowdplay cluster: draining (gateways, shards, then router and sequencer)\n');
    c.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const dead = await c.failed;
  process.stderr.write(
    `crowdplay cluster: ${dead.name} exited unexpectedly (code ${dead.code}, signal ${dead.signal}); stopping the cluster\n`,
  );
  await c.stop();
  process.exit(1);
}

/**
 * `crowdplay telegram setup`: the Bot API calls of telegram-setup.ts, one printed line each. Exit 0 when every call
 * succeeded and the check passed; 1 when Telegram refused a call or the check failed; 2 when refused before any call
 * (a missing token or secret, a public URL Telegram cannot use). Opens neither the store nor Redis, unless
 * `--tenant-bot` names a tenant's own bot, whose token, secret and username it reads from the store.
 */
async function telegramCommand(
  config: Config,
  args: string[],
  v: { publicUrl: string | undefined; dryRun: boolean; deadlineS: string | undefined; tenantBot: string | undefined },
): Promise<void> {
  if (args.length !== 1 || args[0] !== 'setup') fail(USAGE);
  const deadlineS = v.deadlineS === undefined ? SETUP_DEADLINE_S : Number(v.deadlineS);
  if (!Number.isInteger(deadlineS) || deadlineS < 1)
    fail(`crowdplay telegram setup: --deadline-s must be a positive integer, got ${v.deadlineS}`);
  const print = (line: string): void => void process.stdout.write(`${line}\n`);
  let telegram: Parameters<typeof telegramSetup>[0]['telegram'] = config.telegram;
  let webhookPath: string | undefined;
  if (v.tenantBot !== undefined) {
    const botId = /^[1-9]\d{0,15}$/.test(v.tenantBot) ? Number(v.tenantBot) : NaN;
    if (!Number.isSafeInteger(botId))
      fail(`crowdplay telegram setup: --tenant-bot takes a bot id (digits), got ${v.tenantBot.slice(0, 32)}`);
    const store = await connectStore(config);
    try {
      const row = await store.bots.get(botId);
      if (!row) fail(`crowdplay telegram setup: CP_ERR_TELEGRAM_BOT_UNKNOWN: no Telegram bot ${botId} is registered here`, 2);
      const bot = openTenantBot(config, row);
      telegram = { ...config.telegram, botToken: bot.token, webhookSecret: bot.webhookSecret, botUsername: bot.username };
      webhookPath = tenantBotWebhookPath(botId);
    } catch (err) {
      if (isCrowdplayError(err)) fail(`crowdplay telegram setup: ${err.code}: ${err.message}`, 2);
      throw err;
    } finally {
      await store.close();
    }
  }
  try {
    const report = await telegramSetup({
      telegram,
      ...(webhookPath !== undefined ? { webhookPath } : {}),
      publicUrl: v.publicUrl,
      dryRun: v.dryRun,
      deadlineMs: deadlineS * 1_000,
      print,
    });
    if (!report.ok) process.exitCode = 1;
  } catch (err) {
    if (!isCrowdplayError(err)) throw err;
    const refused = err.code !== 'CP_ERR_TELEGRAM_SETUP_FAILED';
    fail(`crowdplay telegram setup: ${err.code}: ${err.message}${refused ? ' (nothing was sent to Telegram)' : ''}`, refused ? 2 : 1);
  }
}

/** `crowdplay ledger verify`: prints each failed invariant; exit code 1 when any failed. */
async function ledgerCommand(config: Config, args: string[]): Promise<void> {
  if (args.length !== 1 || args[0] !== 'verify') fail(USAGE);
  const store = await connectStore(config);
  try {
    const { ok, failures } = await verifyLedger(store.db);
    if (ok) process.stdout.write('ledger verify: ok\n');
    else {
      for (const f of failures) process.stdout.write(`${f.check}: ${f.detail}\n`);
      process.stdout.write(`ledger verify: ${failures.length} failure(s)\n`);
      process.exitCode = 1;
    }
  } finally {
    await store.close();
  }
}

/**
 * The options a command takes (--help aside), by its words; undefined for a tenant subcommand it does not know (that
 * is refused by name later).
 */
function optionsOf(cmd: string, rest: readonly string[]): readonly string[] | undefined {
  if (cmd === 'cluster') return ['gateways', 'shards', 'routers', 'renderers'];
  if (cmd === 'telegram') return ['public-url', 'dry-run', 'deadline-s', 'tenant-bot'];
  if (cmd !== 'tenant') return [];
  const [sub, op] = rest;
  if (sub === 'create') return ['name'];
  if (sub === 'quota') return [...Object.values(QUOTA_FLAGS), 'clear'];
  if (sub === 'bot') return op === 'set' ? ['token', 'webhook-secret'] : op === 'list' || op === 'remove' ? [] : undefined;
  return (TENANT_SUBCOMMANDS as readonly string[]).includes(sub ?? '') ? [] : undefined;
}

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      tokens: true,
      options: {
        name: { type: 'string' },
        gateways: { type: 'string', default: '1' },
        shards: { type: 'string', default: '2' },
        // Two routers: the development cluster shows a standby taking over (the tests ask for it where they test it).
        routers: { type: 'string', default: '2' },
        renderers: { type: 'string', default: '0' },
        'public-url': { type: 'string' },
        'dry-run': { type: 'boolean', default: false },
        'deadline-s': { type: 'string' },
        'tenant-bot': { type: 'string' },
        ...Object.fromEntries(Object.values(QUOTA_FLAGS).map((f) => [f, { type: 'string' as const }])),
        clear: { type: 'string', multiple: true },
        token: { type: 'string' },
        'webhook-secret': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    fail(`crowdplay: ${argsProblem(err)}\n${USAGE}`);
  }
  const { positionals, values } = parsed;
  const [cmd, ...rest] = positionals;
  if (values.help || cmd === 'help' || !cmd) fail(USAGE, values.help || cmd === 'help' ? 0 : 2);
  // Words the command does not take are named before anything starts (a typo must not start something else).
  const takes: Record<string, number> = { start: 0, settings: 0, cluster: 0, service: 1, tenant: 4, ledger: 1, telegram: 1 };
  if (!(cmd in takes)) fail(`crowdplay: unknown command "${cmd}"\n${USAGE}`);
  if (rest.length > takes[cmd]!) fail(`crowdplay ${cmd}: unexpected argument "${rest[takes[cmd]!]}"\n${USAGE}`);
  if (cmd === 'service' && rest[0] === undefined) fail(`crowdplay service: name the service (one of: ${SERVICES.join(', ')})\n${USAGE}`);
  if (cmd === 'service' && !SERVICES.includes(rest[0] as ServiceName))
    fail(`crowdplay service: unknown service "${rest[0]}" (one of: ${SERVICES.join(', ')})\n${USAGE}`);
  if ((cmd === 'ledger' || cmd === 'telegram') && rest[0] !== (cmd === 'ledger' ? 'verify' : 'setup'))
    fail(
      `crowdplay ${cmd}: ${rest[0] === undefined ? 'name what to do' : `unknown subcommand "${rest[0]}"`} (${cmd === 'ledger' ? 'verify' : 'setup'})\n${USAGE}`,
    );
  // An option the command does not take, or one given twice, is refused before anything starts: a --dry-run that a
  // command ignored would let it write.
  const given = parsed.tokens.flatMap((t) => (t.kind === 'option' && t.name !== 'help' ? [t.name] : []));
  const twice = given.find((n, i) => n !== 'clear' && given.indexOf(n) !== i);
  if (twice !== undefined) fail(`crowdplay: option --${twice} is given more than once\n${USAGE}`);
  const allowed = optionsOf(cmd, rest);
  const stray = allowed && given.find((n) => !allowed.includes(n));
  if (allowed && stray !== undefined) {
    const words = cmd === 'tenant' ? (rest[0] === 'bot' ? rest.slice(0, 2) : rest.slice(0, 1)) : cmd === 'service' ? [] : rest;
    fail(
      `crowdplay ${[cmd, ...words].join(' ')}: option --${stray} is not one it takes (${allowed.length > 0 ? `it takes ${allowed.map((o) => `--${o}`).join(', ')}` : 'it takes none'})\n${USAGE}`,
    );
  }
  if (cmd === 'settings') {
    process.stdout.write(`${settingsTable()}\n`);
    return;
  }
  if (cmd === 'cluster') {
    await clusterCommand(Number(values.gateways), Number(values.shards), Number(values.routers), Number(values.renderers));
    return;
  }
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    fail(isCrowdplayError(err) ? `crowdplay: ${err.code}: ${err.message}` : String(err));
  }
  // A --heap-growing-percent given to node itself (NODE_OPTIONS, the command line) wins over the setting's default.
  const ownFlag = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].some((a) => a.includes('--heap-growing-percent'));
  if (config.runtime.heapGrowingPercent > 0 && !ownFlag) setFlagsFromString(`--heap-growing-percent=${config.runtime.heapGrowingPercent}`);
  // Before any service starts: the helper threads that exist now (V8's, libuv's) yield the core to the event loop.
  const helperThreads = cmd === 'start' || cmd === 'service' ? niceHelperThreads(config.runtime.helperThreadNice) : undefined;
  // Read back, not applied: they take effect only when a process starts (npm start → scripts/start.sh).
  const startSettings = processStartSettings(process.execArgv, process.env);
  // Before any worker thread exists: the render threads get their own (small) young generation, not SEMI_SPACE_MB.
  releaseSemiSpaceFlag(startSettings, setFlagsFromString);
  process.on('unhandledRejection', (err) => {
    process.stderr.write(`unhandled rejection: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  });
  switch (cmd) {
    case 'start':
      if (config.mode === 'cluster')
        fail('crowdplay start runs standalone; in cluster mode start each service with `crowdplay service <name>`');
      // The demo game opens rounds of DEMO_ROUND_MS, which every round's bounds must admit (or each is refused).
      if (config.standalone.demo) {
        const { demoRoundMs, minDurationMs, maxDurationMs } = config.rounds;
        if (demoRoundMs < minDurationMs || demoRoundMs > maxDurationMs)
          fail(
            `crowdplay: CP_ERR_CONFIG_INVALID: invalid configuration:\nDEMO_ROUND_MS: must be within ROUND_MIN_DURATION_MS and ROUND_MAX_DURATION_MS ` +
              `(${minDurationMs}–${maxDurationMs}) while DEMO_ENABLED is on, got ${demoRoundMs}`,
          );
      }
      await runUntilSignal(
        config,
        () => startServices(config, SERVICES, { standalone: true, helperThreads, startSettings }),
        await operatorListener(config),
      );
      break;
    case 'service': {
      const name = rest[0] as ServiceName | undefined;
      if (!name || !SERVICES.includes(name)) fail(USAGE);
      if (!config.bus.natsUrl)
        process.stderr.write(`warning: ${name} alone on the in-process bus talks to no other service; set NATS_URL\n`);
      await runUntilSignal(
        config,
        () => startServices(config, [name], { standalone: false, helperThreads, startSettings }),
        await operatorListener(config),
      );
      break;
    }
    case 'tenant':
      await tenantCommand(
        config,
        rest,
        values.name,
        {
          values: Object.fromEntries(
            Object.values(QUOTA_FLAGS).map((f) => [f, (values as Record<string, unknown>)[f] as string | undefined]),
          ),
          clear: values.clear ?? [],
        },
        { token: values.token, webhookSecret: values['webhook-secret'] },
      );
      break;
    case 'ledger':
      await ledgerCommand(config, rest);
      break;
    case 'telegram':
      await telegramCommand(config, rest, {
        publicUrl: values['public-url'],
        dryRun: values['dry-run'],
        deadlineS: values['deadline-s'],
        tenantBot: values['tenant-bot'],
      });
      break;
    default:
      fail(USAGE);
  }
}

/**
 * Every process that runs services serves /healthz, /readyz and /metrics on HEALTH_HOST:HEALTH_PORT when the port
 * is set (k8s probes, Prometheus), a gateway's included: its PORT serves /metrics only with METRICS_ON_PORT.
 * @throws (rejects) as startHealthServer: CP_ERR_CONFIG_INVALID naming HEALTH_PORT when its port is taken
 */
async function operatorListener(config: Config): Promise<{ health?: HealthServer }> {
  if (config.http.healthPort === 0) return {};
  return {
    health: await startHealthServer({
      host: config.http.healthHost,
      port: config.http.healthPort,
      requestTimeoutMs: config.http.requestTimeoutMs,
    }),
  };
}

/** System errors a user can act on: one line, no stack (set LOG_LEVEL=debug for it). */
const EXPECTED_CODES = new Set([
  'EADDRINUSE',
  'EADDRNOTAVAIL',
  'EACCES',
  'ECONNREFUSED',
  'ENOTFOUND',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'CONNECTION_REFUSED',
]);

main().catch((err: unknown) => {
  const e = err as { code?: unknown; message?: string; stack?: string };
  const expected = isCrowdplayError(err) || (typeof e.code === 'string' && EXPECTED_CODES.has(e.code));
  const verbose = ['debug', 'trace'].includes(process.env.LOG_LEVEL ?? '');
  // A crowdplay error names its code first (CP_ERR_STORE_UNAVAILABLE: …, the setting and its URL in the message).
  const text =
    err instanceof Error
      ? expected && !verbose
        ? isCrowdplayError(err)
          ? `${err.code}: ${err.message}`
          : `${e.message}${typeof e.code === 'string' ? ` (${e.code})` : ''}`
        : (e.stack ?? e.message)
      : String(err);
  process.stderr.write(`crowdplay: ${text}\n`);
  // A setting that cannot work (found once a service uses it, e.g. PGLITE_DIR) exits as the settings check does.
  process.exit(isCrowdplayError(err, 'CP_ERR_CONFIG_INVALID') ? 2 : 1);
});
