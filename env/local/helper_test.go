package local

const helperEnvVar = "CORRAL_LOCAL_TEST_HELPER"

func helperMain() int { return 0 }
