import { CrowdplayError } from '@crowdplay/protocol';
import { isSetting, type SchemaTree, type Setting, type ValueOf } from './dsl.ts';
import { schema, type Schema } from './schema.ts';

export type Config = ValueOf<Schema>;

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object') {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

function build(tree: SchemaTree, env: Readonly<Record<string, string | undefined>>, errors: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, node] of Object.entries(tree)) {
    if (isSetting(node)) {
      const s = node as Setting<unknown>;
      const raw = env[s.env];
      if (raw === undefined) out[k] = s.default;
      else {
        const r = s.parse(raw);
        if (r.ok) out[k] = r.value;
        else errors.push(`${s.env}: ${r.error}`);
      }
    } else out[k] = build(node, env, errors);
  }
  return out;
}

/**
 * Parses the environment into the frozen, typed configuration. Called once,
 * at start-up, by the CLI; everything else receives the object (or its part).
 *
 * @param env the environment (pass `process.env`; tests pass a literal)
 * @param overrides values applied after parsing (tests; never from users)
 * @throws CrowdplayError CP_ERR_CONFIG_INVALID listing every bad variable, one per line
 */
export function loadConfig(env: Readonly<Record<string, string | undefined>>): Config {
  const errors: string[] = [];
  const value = build(schema, env, errors) as unknown as Config;
  if (value.mode === 'cluster') {
    for (const s of [schema.db.url, schema.bus.natsUrl, schema.redis.url]) {
      if (!env[s.env]) errors.push(`${s.env}: required when CROWDPLAY_MODE=cluster (no embedded adapter in cluster mode)`);
    }
  }
  // The group burst is bounded by the group rate it bursts within (libs/sendq gcra.ts: T = 60 s / (rate − (burst − 1))).
  // Either is undefined when its own variable was refused above, and the comparison is then false.
  const { groupBurst, groupRatePerMin } = value.telegram;
  if (groupBurst > groupRatePerMin) {
    errors.push(
      `${schema.telegram.groupBurst.env}: must be at most ${schema.telegram.groupRatePerMin.env} (${groupRatePerMin}), got ${groupBurst}`,
    );
  }
  // Every round is checked against both bounds (services/crowd-engine rounds): crossed, no round could ever open.
  const { minDurationMs, maxDurationMs } = value.rounds;
  if (minDurationMs > maxDurationMs) {
    errors.push(
      `${schema.rounds.minDurationMs.env}: must be at most ${schema.rounds.maxDurationMs.env} (${maxDurationMs}), got ${minDurationMs}`,
    );
  }
  // Checked here, before anything opens: a bot without its webhook secret would otherwise fail after migrations ran.
  if (env[schema.telegram.botToken.env] && !env[schema.telegram.webhookSecret.env]) {
    errors.push(`${schema.telegram.webhookSecret.env}: required when ${schema.telegram.botToken.env} is set (the webhook checks it)`);
  }
  if (errors.length > 0) throw new CrowdplayError('CP_ERR_CONFIG_INVALID', [errors.join('\n')]);
  return deepFreeze(value);
}

/** The configuration with every default (tests), with `patch` merged per section. */
export function defaultConfig(patch: { [K in keyof Config]?: Config[K] extends object ? Partial<Config[K]> : Config[K] } = {}): Config {
  const base = build(schema, {}, []) as Record<string, unknown>;
  for (const [k, v] of Object.entries(patch)) {
    base[k] = v && typeof v === 'object' ? { ...(base[k] as object), ...v } : v;
  }
  return deepFreeze(base as unknown as Config);
}
