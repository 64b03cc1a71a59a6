/**
 * @crowdplay/gateway — the WebSocket + HTTP edge. See PROTOCOL-NOTES.md for
 * every frame, close code and route it implements.
 */
export { createGateway, WS_PATH, PRE_AUTH_MAX_FRAMES, GAME_QUEUE_MAX, GAME_MIN_MESSAGE_BYTES, CLOSE_HANDSHAKE_MS } from './gateway.ts';
export type { Gateway, GatewayDeps, GatewayState, GatewayStats } from './gateway.ts';
export {
  Authenticator,
  mintDevToken,
  tenantKey,
  DEV_TENANT_ID,
  DEV_TOKEN_TTL_S,
  MAX_VIEWER_ID_CHARS,
  AUTH_CACHE_TTL_MS,
  UNKNOWN_CHANNEL_TTL_MS,
  AUTH_CACHE_MAX_ENTRIES,
} from './auth.ts';
export type { AuthenticatorOptions, CrowdIdentity } from './auth.ts';
export {
  buildSdkBundle,
  SDK_VIEWER_ENTRY,
  PUBLIC_DIR,
  PROMETHEUS_CONTENT_TYPE,
  MINI_APP_PATH,
  requestDeadlineOptions,
  clientErrors,
} from './http.ts';
export { DEV_TOKEN_BODY_LIMIT_BYTES, devTokenDecision, isLoopbackHost } from './dev-tokens.ts';
export type { GatewayMetrics } from './metrics.ts';
export { TELEGRAM_WEBHOOK_PATH, registerTelegramWebhook, type TelegramUpdate, type TelegramWebhookOptions } from './telegram-webhook.ts';
export { TelegramAuth, type TelegramIdentity } from './telegram-auth.ts';
export { registerTenantBotWebhooks, tenantBotWebhookPath, type TenantBots, type TenantBotWebhook } from './tenant-bot-webhooks.ts';
export { webhookIntake, type WebhookIntake } from './telegram-webhook.ts';
