import { memoryHarness } from './harness.ts';
import { sendqSuite } from './sendq-suite.ts';

sendqSuite('memory', memoryHarness);
