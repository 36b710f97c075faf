from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateEnvSessionRequest(_message.Message):
    __slots__ = ("env_id", "kwargs_json")
    ENV_ID_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    env_id: str
    kwargs_json: str
    def __init__(self, env_id: _Optional[str] = ..., kwargs_json: _Optional[str] = ...) -> None: ...

class CreateEnvSessionResponse(_message.Message):
    __slots__ = ("session_id", "env_spec_json", "multi_agent", "possible_agents", "idle_timeout_s")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ENV_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    MULTI_AGENT_FIELD_NUMBER: _ClassVar[int]
    POSSIBLE_AGENTS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    env_spec_json: str
    multi_agent: bool
    possible_agents: _containers.RepeatedScalarFieldContainer[str]
    idle_timeout_s: float
    def __init__(self, session_id: _Optional[str] = ..., env_spec_json: _Optional[str] = ..., multi_agent: _Optional[bool] = ..., possible_agents: _Optional[_Iterable[str]] = ..., idle_timeout_s: _Optional[float] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name", "tool_call_id")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    tool_call_id: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class ChatMessages(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("text", "chat")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    text: str
    chat: ChatMessages
    def __init__(self, text: _Optional[str] = ..., chat: _Optional[_Union[ChatMessages, _Mapping]] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("session_id", "seed", "options_json", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    seed: int
    options_json: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., seed: _Optional[int] = ..., options_json: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ("observation", "info_json", "agent_state")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    AGENT_STATE_FIELD_NUMBER: _ClassVar[int]
    observation: Observation
    info_json: str
    agent_state: AgentCycleState
    def __init__(self, observation: _Optional[_Union[Observation, _Mapping]] = ..., info_json: _Optional[str] = ..., agent_state: _Optional[_Union[AgentCycleState, _Mapping]] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("session_id", "action", "request_id", "stop_reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    action: str
    request_id: str
    stop_reason: str
    def __init__(self, session_id: _Optional[str] = ..., action: _Optional[str] = ..., request_id: _Optional[str] = ..., stop_reason: _Optional[str] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("observation", "reward", "terminated", "truncated", "info_json", "agent_state")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    AGENT_STATE_FIELD_NUMBER: _ClassVar[int]
    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info_json: str
    agent_state: AgentCycleState
    def __init__(self, observation: _Optional[_Union[Observation, _Mapping]] = ..., reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., info_json: _Optional[str] = ..., agent_state: _Optional[_Union[AgentCycleState, _Mapping]] = ...) -> None: ...

class RoleState(_message.Message):
    __slots__ = ("reward", "cumulative_reward", "terminated", "truncated", "info_json")
    REWARD_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    reward: float
    cumulative_reward: float
    terminated: bool
    truncated: bool
    info_json: str
    def __init__(self, reward: _Optional[float] = ..., cumulative_reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., info_json: _Optional[str] = ...) -> None: ...

class AgentCycleState(_message.Message):
    __slots__ = ("agent_selection", "agents", "roles", "done")
    class RolesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RoleState
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RoleState, _Mapping]] = ...) -> None: ...
    AGENT_SELECTION_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    agent_selection: str
    agents: _containers.RepeatedScalarFieldContainer[str]
    roles: _containers.MessageMap[str, RoleState]
    done: bool
    def __init__(self, agent_selection: _Optional[str] = ..., agents: _Optional[_Iterable[str]] = ..., roles: _Optional[_Mapping[str, RoleState]] = ..., done: _Optional[bool] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("session_id", "role")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    role: str
    def __init__(self, session_id: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("observation",)
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    observation: Observation
    def __init__(self, observation: _Optional[_Union[Observation, _Mapping]] = ...) -> None: ...

class LastRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class LastResponse(_message.Message):
    __slots__ = ("role", "observation", "cumulative_reward", "terminated", "truncated", "info_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    role: str
    observation: Observation
    cumulative_reward: float
    terminated: bool
    truncated: bool
    info_json: str
    def __init__(self, role: _Optional[str] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ..., cumulative_reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., info_json: _Optional[str] = ...) -> None: ...

class AgentSelectionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseEnvSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseEnvSessionResponse(_message.Message):
    __slots__ = ("closed",)
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    closed: bool
    def __init__(self, closed: _Optional[bool] = ...) -> None: ...
