"""``nni.runtime.tuner_command_channel.CommandType``: the names of NNI's dispatcher commands,
with NNI 3.0's two-letter codes, as an advisor's ``send`` names them."""

from enum import Enum


class CommandType(Enum):
    # to the advisor
    Initialize = "IN"
    RequestTrialJobs = "GE"
    ReportMetricData = "ME"
    UpdateSearchSpace = "SS"
    ImportData = "FD"
    AddCustomizedTrialJob = "AD"
    TrialEnd = "EN"
    Terminate = "TE"
    Ping = "PI"

    # from the advisor
    Initialized = "ID"
    NewTrialJob = "TR"
    SendTrialJobParameter = "SP"
    NoMoreTrialJobs = "NO"
    KillTrialJob = "KI"
    Error = "ER"
