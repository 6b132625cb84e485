/**
 * Label values a remote peer cannot multiply: a skill label takes the skills
 * hosted here (else `other`), a code label the codes of the stack's errors
 * up to a bound (else `other`). No label ever carries a DID, peer id or task id.
 */

/** The label value of everything outside the bounded set */
export const OTHER = 'other'

/** A code: upper-case letters, digits and `_`, as the stack's error codes are */
const CODE = /^[A-Z][A-Z0-9_]{0,63}$/

/**
 * A bounded set of label values: the first `max` distinct values that pass
 * `accept` are kept as they are, the rest become `other`
 */
export class BoundedLabel {
  private readonly seen = new Set<string>()

  constructor (private readonly max: number, private readonly accept: (value: string) => boolean = () => true) {}

  of (value: string | undefined): string {
    if (value == null || !this.accept(value)) return OTHER
    if (this.seen.has(value)) return value
    if (this.seen.size >= this.max) return OTHER
    this.seen.add(value)
    return value
  }
}

/** A bounded label of error codes */
export function codeLabel (max: number): BoundedLabel {
  return new BoundedLabel(max, code => CODE.test(code))
}

/**
 * The skill label: a skill hosted on this node (looked up through
 * `hosted`), else `other`. Skills this node submits to are chosen by its
 * own code, not by a peer: up to `maxSubmitted` of them keep their name.
 */
export class SkillLabel {
  private readonly submitted: BoundedLabel

  constructor (private readonly hosted: (skill: string) => boolean, maxSubmitted: number) {
    this.submitted = new BoundedLabel(maxSubmitted)
  }

  /** The label of a skill served here */
  served (skill: string | undefined): string {
    return skill != null && this.hosted(skill) ? skill : OTHER
  }

  /** The label of a skill this node asked another agent for */
  asked (skill: string): string {
    return this.hosted(skill) ? skill : this.submitted.of(skill)
  }
}
