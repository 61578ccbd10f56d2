package skills

// New checks a skill folder given as its files (paths relative to the
// folder, with /) and returns the skill. folder is the folder's name, which
// the skill's name must equal; source is Skill.Source. Errors are *Error.
func New(folder, source string, files map[string][]byte) (*Skill, error) {
	return newSkill(folder, folder, source, files)
}
