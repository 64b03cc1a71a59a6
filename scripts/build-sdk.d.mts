/** Types of scripts/build-sdk.mjs (see its header). */
export const SDKS: Record<'sdk-viewer' | 'sdk-game', { external: string[] }>;
export const HOSTED_VIEWER_FILE: string;
export function sdkVersion(sdk: 'sdk-viewer' | 'sdk-game'): string;
export function hostedViewerBanner(version: string): string;
export function buildHostedViewer(): Promise<string>;
export function buildSdk(sdk: 'sdk-viewer' | 'sdk-game'): Promise<{ files: string[]; ms: number }>;
