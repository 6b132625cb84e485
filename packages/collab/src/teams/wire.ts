/**
 * The team records at the level of the wire (`spec/teams.md` 3, 5, 6, 8):
 * signing, verification, CIDs, strict parsers and prefixes, for the layers
 * and the implementers of a compatible peer (`@ioa/collab/wire`); an
 * application uses the team and negotiation services instead.
 */
export {
  signRecord as signTeamRecord, verifyRecord as verifyTeamRecord, newId as newMessageId, newTeamId, cidOf as teamRecordCid,
  TEAM_PREFIXES, TEAM_RECORD_VERSION, MESSAGE_TYPES, recordSigningBytes, parseRoster, parseMessage, parseEntry, parseInvitation,
  parseAcceptance, parseCheckpoint, parseClaim
} from './records.js'
export { CFP_ID, newCfpId, parseAward, parseCfp, parseCommitment, parseProposal, signCfp } from './negotiation/records.js'
