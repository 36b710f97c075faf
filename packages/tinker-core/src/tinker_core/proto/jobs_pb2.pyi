import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
    JOB_STATE_PAUSED: _ClassVar[JobState]

class ConfigFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIG_FORMAT_UNSPECIFIED: _ClassVar[ConfigFormat]
    CONFIG_FORMAT_YAML: _ClassVar[ConfigFormat]
    CONFIG_FORMAT_JSON: _ClassVar[ConfigFormat]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
JOB_STATE_PAUSED: JobState
CONFIG_FORMAT_UNSPECIFIED: ConfigFormat
CONFIG_FORMAT_YAML: ConfigFormat
CONFIG_FORMAT_JSON: ConfigFormat

class Job(_message.Message):
    __slots__ = ("id", "state", "reason", "priority", "tenant", "created_at", "started_at", "finished_at", "run_dir", "checkpoint_path", "config_text", "config_format", "client_request_id", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    CONFIG_TEXT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: JobState
    reason: str
    priority: int
    tenant: str
    created_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    run_dir: str
    checkpoint_path: str
    config_text: str
    config_format: ConfigFormat
    client_request_id: str
    name: str
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., reason: _Optional[str] = ..., priority: _Optional[int] = ..., tenant: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_dir: _Optional[str] = ..., checkpoint_path: _Optional[str] = ..., config_text: _Optional[str] = ..., config_format: _Optional[_Union[ConfigFormat, str]] = ..., client_request_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("config_text", "config_format", "client_request_id", "priority")
    CONFIG_TEXT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    config_text: str
    config_format: ConfigFormat
    client_request_id: str
    priority: int
    def __init__(self, config_text: _Optional[str] = ..., config_format: _Optional[_Union[ConfigFormat, str]] = ..., client_request_id: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "page_size", "page_token")
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    page_size: int
    page_token: str
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PauseJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ResumeJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class SetJobSettingsRequest(_message.Message):
    __slots__ = ("job_id", "settings")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    settings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., settings: _Optional[_Iterable[str]] = ...) -> None: ...

class SetJobSettingsResponse(_message.Message):
    __slots__ = ("job", "request")
    JOB_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    job: Job
    request: str
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., request: _Optional[str] = ...) -> None: ...

class ForkJobRequest(_message.Message):
    __slots__ = ("job_id", "step", "overrides", "client_request_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    step: int
    overrides: _containers.RepeatedScalarFieldContainer[str]
    client_request_id: str
    def __init__(self, job_id: _Optional[str] = ..., step: _Optional[int] = ..., overrides: _Optional[_Iterable[str]] = ..., client_request_id: _Optional[str] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id", "after_cursor")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    after_cursor: int
    def __init__(self, job_id: _Optional[str] = ..., after_cursor: _Optional[int] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("cursor", "job_id", "time", "state_change", "metrics", "log")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    job_id: str
    time: _timestamp_pb2.Timestamp
    state_change: JobStateChange
    metrics: JobMetrics
    log: JobLogLine
    def __init__(self, cursor: _Optional[int] = ..., job_id: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state_change: _Optional[_Union[JobStateChange, _Mapping]] = ..., metrics: _Optional[_Union[JobMetrics, _Mapping]] = ..., log: _Optional[_Union[JobLogLine, _Mapping]] = ...) -> None: ...

class JobStateChange(_message.Message):
    __slots__ = ("previous_state", "state", "reason")
    PREVIOUS_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    previous_state: JobState
    state: JobState
    reason: str
    def __init__(self, previous_state: _Optional[_Union[JobState, str]] = ..., state: _Optional[_Union[JobState, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class JobMetrics(_message.Message):
    __slots__ = ("step", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    step: int
    values: _containers.ScalarMap[str, float]
    def __init__(self, step: _Optional[int] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...

class JobLogLine(_message.Message):
    __slots__ = ("source", "level", "text")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    source: str
    level: str
    text: str
    def __init__(self, source: _Optional[str] = ..., level: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...
