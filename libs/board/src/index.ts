/**
 * @crowdplay/board: the live board of a chat game (model, layout, renderer,
 * measured cost model, render pool). docs/board.md.
 */
export {
  BOARD_MAX_OUTCOMES,
  BOARD_MAX_ROUNDS,
  CARD_ROWS,
  ROW_SQUARES,
  validateBoard,
  type Board,
  type BoardOutcome,
  type BoardRound,
  type Card,
  type Square,
} from './model.ts';
export { roundStripText, type RoundStripText } from './round-strip.ts';
export { BOARD_MAX_CARDS, GEOMETRY, GRID_H, GRID_W, NAME_W, cardOrigin, layout, roundOrigin, type BoardLayout } from './layout.ts';
export {
  FONT_STACK,
  adoptFontRegistry,
  boardFontFiles,
  ensureBoardGlyphs,
  onDemandFontFiles,
  registerBoardFonts,
  shareFontRegistry,
  type FontRegistration,
} from './fonts.ts';
export { BOARD_PNG_OPTIONS, encodePng, quantize, type PngFilter, type PngOptions, type Quantized } from './png.ts';
export {
  COLOURS,
  avatarThumbnail,
  cleanText,
  drawBoard,
  fitText,
  isRtl,
  releaseThreadCaches,
  renderBoard,
  warmUpFonts,
  type RenderOptions,
  type RenderResult,
} from './render.ts';
export { RENDER_COST_MODEL, fitLine, renderCost, type RenderCost } from './cost.ts';
export {
  RenderPool,
  SLOTS_PER_THREAD,
  defaultRenderConcurrency,
  type BoardMetrics,
  type BoardRefusals,
  type RenderOutcome,
  type RenderPoolOptions,
  type RenderPoolStats,
} from './pool.ts';
export { sampleAvatar, sampleBoard } from './sample.ts';
