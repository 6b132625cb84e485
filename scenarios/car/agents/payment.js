// The payment agent: pays only under a delegation chain rooted at the person
// who pays (the node's `tasks.roots`) and within the capability's caps (the
// node's `tasks.enforceConstraints`); it reports the chain it verified.
/** @type {import('@ioa/node').AgentModule} */
export default async function payment ({ log }) {
  let seq = 0
  return {
    handlers: {
      'payment.pay': async (input, ctx) => {
        const cap = ctx.capability.constraints?.maxAmount
        const amount = Number(input.amount)
        const issuers = ctx.chain.path.map(t => t.payload.iss)
        const receipt = `PAY-${String(++seq).padStart(5, '0')}`
        log('paid', {
          text: `paid ${amount} ${input.currency} to ${String(input.payee).slice(0, 16)}… (ref ${input.reference}); cap ${cap} ${ctx.capability.constraints?.currency ?? ''}, chain of ${ctx.chain.path.length} rooted at the driver`,
          amount,
          currency: input.currency,
          cap,
          root: ctx.chain.root,
          depth: ctx.chain.path.length,
          issuers,
          caller: ctx.caller,
          reference: input.reference,
          receipt
        })
        return { receipt, paid: amount, currency: input.currency, reference: input.reference }
      }
    }
  }
}
