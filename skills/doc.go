// Package skills serves Agent Skills (docs/protocol.md section 10): folders
// holding a SKILL.md with YAML front matter and a markdown body, plus any
// other files, the skill's resources.
//
// Parse checks one SKILL.md against every rule of the format. A Catalogue
// gathers skills from local folders and from the P_skills object store
// (watched, so a push or a removal reaches every router at once), keyed by
// a digest of each skill's content so that an unchanged skill is never read
// again. A View is what one session of one user may see; its loader,
// load_skill_through_path, is a pure function of the view and the call's
// input. Materializer puts a skill's files on disk, in a directory named by
// its digest, for tools that run its scripts.
package skills
