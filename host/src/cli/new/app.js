// `{{name}}`: replace this with what the skill does.

import { ToolError, callTool, defineSkill, log } from './skillhost_skill.js';

export const { manifest, instructions, run } = defineSkill({
  name: '{{name}}', // the function name the LLM calls
  version: '0.1.0',
  // The LLM reads this to decide whether to call the skill: say what it does
  // and when to use it.
  description: 'Looks up an order of the shop and says its status.',
  parameters: {
    type: 'object',
    properties: { orderId: { type: 'string', description: 'The order number' } },
    required: ['orderId'],
    additionalProperties: false,
  },
  tools: ['queryOrder'], // the only tools it may call
  // The system prompt of the LLM-driven path.
  instructions: `You look up orders of the shop.

1. Use \`queryOrder\` with the order number the user gives.
2. If the order does not exist, say that the number may be wrong.

Answer with the order's status in one sentence.`,
  testCases: [
    {
      name: 'a delivered order',
      input: { orderId: '88231' },
      expectTools: ['queryOrder'],
      expectContains: ['delivered'],
    },
  ],
  steps({ orderId }) {
    let order;
    try {
      order = callTool('queryOrder', { orderId });
    } catch (error) {
      if (error instanceof ToolError && error.kind === 'rejected') {
        // The shop does not know the order.
        return { found: false, message: `Order ${orderId} was not found.` };
      }
      throw error;
    }
    log.info(`order ${orderId} is ${order.status}`);
    return { found: true, status: order.status, message: `Order ${orderId} is ${order.status}.` };
  },
});
