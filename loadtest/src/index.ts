/**
 * @crowdplay/loadtest — load scenarios (`crowd`: viewers acting in channels, `market`:
 * funded viewers trading and staking in rounds, then ledger verify;
 * `rollover`: Telegram chats at the word puzzle's rollover; `failover`: a
 * local cluster with a shard killed, one drained and a gateway restarted; `multigame`: one game process serving
 * many Telegram chats over one connection), the
 * frozen bare-ws reference server, and the report formats. CLI: main.ts.
 */
export {
  runCrowdScenario,
  runCrowdWithBaseline,
  machineInfo,
  DEV_TENANT,
  DEFAULT_FAN_IN_PER_S,
  MAX_SOCKETS_PER_WORKER,
  DEFAULT_VIEWERS_PER_ADDRESS,
  GENERATOR_BOUND_PCT,
  GENERATOR_BOUND_PEAK_PCT,
  MACHINE_SATURATED_PCT,
} from './crowd/scenario.ts';
export type { CrowdOptions } from './crowd/scenario.ts';
export { formatReport } from './crowd/report.ts';
export type { CrowdReport, CrowdReport as Report, MachineInfo } from './crowd/report.ts';
export { runMarketScenario, MAX_MARKET_VIEWERS, MARKET_OUTCOMES } from './market/scenario.ts';
export type { MarketOptions } from './market/scenario.ts';
export { formatMarketReport, TRADE_KINDS } from './market/report.ts';
export type { MarketReport, TradeCounts, TradeKind, CheckResult, SettledRound } from './market/report.ts';
export { MIX_PCT, LEGIT_REFUSALS } from './market/viewers.ts';
export { ledgerVerify, CLI_MAIN } from './market/server-api.ts';
export type { VerifyOutcome } from './market/server-api.ts';
export { startReferenceServer } from './reference-server.ts';
export type { ReferenceServer, ReferenceServerOptions } from './reference-server.ts';
export { spawnReferenceServer } from './reference-spawn.ts';
export type { SpawnedReferenceServer } from './reference-spawn.ts';
export {
  findListeningPid,
  mainThreadCpuMs,
  processCpuMs,
  cpuMsByComm,
  cpuDeltaMs,
  clockTicksPerSecond,
  machineCpuTicks,
  processRssBytes,
  ProcessWatch,
  parseWatchPid,
} from './proc.ts';
export type { ProcessSample } from './proc.ts';
export type { LatencySummary } from './hist.ts';
export { allowedSends, idealStaleness, slotLagMs, BUCKET_RATES, type BucketRates } from './rollover/bucket-model.ts';
export { avatarsAfterLastChange, type AvatarDownload } from './rollover/avatar-lag.ts';
export { parseContention, startContention, type Contention, type ContendingLoad } from './rollover/contend.ts';
export { tailKind, tailKinds, type FinalBoard, type TailKind, type TailSummary } from './rollover/tail.ts';
export {
  runRolloverScenario,
  actAckShare,
  msSummary,
  DEFAULT_DATABASE_URL,
  DEFAULT_REDIS_URL,
  DEFAULT_PLAYERS_PER_ADDRESS,
  MAX_ROLLOVER_SOCKETS,
  CHAT_ID_BASE,
  PLAYER_ID_BASE,
  AVATAR_POOL,
} from './rollover/scenario.ts';
export type { RolloverOptions } from './rollover/scenario.ts';
export { boardPipelineSummary, formatRolloverReport } from './rollover/report.ts';
export type { BoardPipeline, RolloverReport, RolloverTarget, MsSummary } from './rollover/report.ts';
export { playerWords, MAX_GUESSES } from './rollover/players.ts';
export { boardPipelineOf, buildProductBundle, metricValue, readRss, sendqKeyPattern } from './rollover/product.ts';
export { runFailoverScenario, lostIntents, stakeHash, FAILOVER_DEFAULTS } from './failover/scenario.ts';
export { msFigures } from './failover/report.ts';
export type { FailoverOptions } from './failover/scenario.ts';
export { formatFailoverReport } from './failover/report.ts';
export type { FailoverReport, FailoverTarget, RecoveryFigures } from './failover/report.ts';
export { runMultigameScenario, MAX_MULTIGAME_CHATS } from './multigame/scenario.ts';
export type { MultigameOptions } from './multigame/scenario.ts';
export { formatMultigameReport } from './multigame/report.ts';
export type { MultigameReport } from './multigame/report.ts';
