package nohup

// The resident machinery is the engine's own; its tests reach it here.
type (
	Resident     = resident
	ResidentPool = residentPool
)

var (
	NewResident       = newResident
	ResidentScript    = residentScript
	ErrNoResident     = errNoResident
	ErrResidentBroken = errResidentBroken
)
